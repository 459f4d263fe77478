"""Deployment artifacts side by side: sizes, speed and the quality cost of quantization.

Exports a trained model directory (all formats, float16 and int8 TFLite and
CTranslate2 variants), then in one run measures per-sentence latency at batch 1 and
throughput at batch 32 for the Keras model, the SavedModel (plain and --xla), TFLite
float32/float16/int8, ONNX Runtime, and CTranslate2 float32/int8 with 1 and 2 threads (in a
process of its own, see ctranslate2_timing.py), all decoding greedily from the same token ids,
and scores each one's translations (exact match, lowercased BLEU) against the test
split's references, with how often each agrees with TFLite float32.

    python bench/export.py --model kformer-demo --data builtin
    python bench/export.py --model /tmp/kformer-bench-train/kformer --data ../shared/corpora/spa-eng/spa-eng.zip
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import checkouts  # bench/checkouts.py, beside this script
import numpy as np
import onnxruntime
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

import kformer
from kformer.deploy.export import export
from kformer.training.evaluation import score

wordpiece = checkouts.wordpiece()
WordPiece, output_limit, pad_batch = wordpiece.WordPiece, wordpiece.output_limit, wordpiece.pad_batch


def test_split(data):
    from kformer.data.corpus import builtin_splits
    from kformer.data.pairs import read_pairs, split_pairs

    return builtin_splits()["test"] if data == "builtin" else split_pairs(read_pairs(data))["test"]


def runners(trained, out, xla_out):
    translator = kformer.Translator(trained)
    saved = tf.saved_model.load(str(out / "saved_model" / "kformer" / "1")).signatures["translate_ids"]
    saved_xla = tf.saved_model.load(str(xla_out / "saved_model" / "kformer" / "1")).signatures["translate_ids"]
    result = {
        "Keras (Translator)": lambda ids: translator.translate_ids(ids).numpy(),
        "SavedModel": lambda ids: saved(encoder_tokens=tf.constant(ids))["output_tokens"].numpy(),
        "SavedModel (--xla)": lambda ids: saved_xla(encoder_tokens=tf.constant(ids))["output_tokens"].numpy(),
    }
    for variant in ("", "_float16", "_int8"):
        interpreter = Interpreter(model_path=str(out / "tflite" / f"translate_ids{variant}.tflite"))
        runner = interpreter.get_signature_runner()
        result[f"TFLite {variant[1:] or 'float32'}"] = lambda ids, r=runner: r(encoder_tokens=ids)["output_tokens"]
    session = onnxruntime.InferenceSession(str(out / "onnx" / "translate_ids.onnx"))
    name = session.get_inputs()[0].name
    result["ONNX Runtime"] = lambda ids: session.run(["output_tokens"], {name: ids})[0]
    return result


def ctranslate2_in_its_own_process(model_dir, threads, batches, source, target, manifest, rounds):
    """(ms a sentence at batch 1, sentences/s at batch 32, translations), timed by bench/ctranslate2_timing.py.

    Same sentences, padding widths and output limits as the other runtimes get.
    """

    def pieces(batch):
        return [[source.vocabulary[t] for t in row if t] for row in batch]

    def limit(batch):  # kformer's output limit for the batch's padded source width
        return output_limit(manifest, batch.shape[1])

    request = {
        "singles": pieces(batches[0]),
        "single_limits": [limit(batches[0])] * len(batches[0]),
        "batches": [pieces(batch) for batch in batches],
        "max_lengths": [limit(batch) for batch in batches],
    }
    script = Path(__file__).resolve().parent / "ctranslate2_timing.py"
    result = subprocess.run(
        [sys.executable, str(script), str(model_dir), str(threads), str(rounds)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
    )
    timing = json.loads(result.stdout)
    translations = [target.detokenize([target.ids[t] for t in output]) for output in timing["outputs"]]
    return timing["latency_ms"], timing["throughput"], translations


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", default="builtin", help="'builtin' or a pair file whose test split to use")
    parser.add_argument("--sentences", type=int, default=512, help="test sentences for the quality check")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds; each runtime's best is reported")
    args = parser.parse_args()
    trained = kformer.load(args.model)
    scratch = Path(tempfile.mkdtemp())
    out = scratch / "deploy"
    manifest = export(trained, out, quantize=("float16", "int8"))
    export(trained, scratch / "deploy-xla", formats=("saved_model",), xla=True, verbose=False)
    sizes = {
        name: size for name, size in manifest["files"].items() if name.endswith((".tflite", ".onnx", "/", "model.bin"))
    }
    print("\nartifact sizes:")
    for name, size in sizes.items():
        print(f"  {name:<40}{size / 1e6:>8.2f} MB")
    float32 = sizes["tflite/translate_ids.tflite"]
    print(f"  int8 / float32 TFLite: {sizes['tflite/translate_ids_int8.tflite'] / float32:.0%}")

    test = test_split(args.data)[: args.sentences]
    source = WordPiece(out / "source_vocab.txt")
    target = WordPiece(out / "target_vocab.txt")
    max_length = manifest["max_length"]
    batches = [
        np.array(pad_batch([source.tokenize(s)[:max_length] for s, _ in test[i : i + 32]]), np.int32)
        for i in range(0, len(test), 32)
    ]
    contenders = runners(trained, out, scratch / "deploy-xla")
    singles = [row[None] for row in batches[0]]
    translations = {}
    for name, run in contenders.items():
        for tokens in singles:  # warm up every shape timed below (XLA compiles once per shape); batches: next line
            run(tokens)
        translations[name] = [target.detokenize(row) for batch in map(run, batches) for row in batch]
    latencies, throughputs = {name: [] for name in contenders}, {name: [] for name in contenders}
    for round_index in range(args.rounds):  # rounds alternate between runtimes, so machine noise hits each alike
        for name, run in contenders.items():
            started = time.perf_counter()
            for tokens in singles:
                run(tokens)
            latencies[name].append((time.perf_counter() - started) / len(singles) * 1000)
            started = time.perf_counter()
            for batch in batches:
                run(batch)
            throughputs[name].append(len(test) / (time.perf_counter() - started))
        print(f"round {round_index + 1} of {args.rounds} done", flush=True)
    print(f"\nbest of {args.rounds} rounds\n{'runtime':<28}{'ms/sentence, batch 1':>22}{'sentences/s, batch 32':>23}")
    for name in contenders:
        print(f"{name:<28}{min(latencies[name]):>22.1f}{max(throughputs[name]):>23.1f}", flush=True)
    for variant in ("", "_int8"):
        for threads in (1, 2):
            name = f"CTranslate2 {variant[1:] or 'float32'}, {threads} thr"
            latency, throughput, translations[name] = ctranslate2_in_its_own_process(
                out / f"ctranslate2{variant}", threads, batches, source, target, manifest, args.rounds
            )
            print(f"{name:<28}{latency:>22.1f}{throughput:>23.1f}", flush=True)
    references = [t for _, t in test]
    print(f"\nquality on {len(test)} test sentences ({args.data}), greedy:")
    baseline = score(translations["TFLite float32"], references, lowercase=True)
    for name in translations:
        result = score(translations[name], references, lowercase=True)
        agree = np.mean([a == b for a, b in zip(translations[name], translations["TFLite float32"], strict=True)])
        print(
            f"  {name:<28} BLEU {result['bleu']:6.2f} ({result['bleu'] - baseline['bleu']:+.2f})  "
            f"exact {result['exact_match']:6.2f}%  same output as float32: {agree:.1%}"
        )
    shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
