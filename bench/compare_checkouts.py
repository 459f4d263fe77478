"""Tokens before and after a change: this checkout against another, in every runtime.

For one trained model directory, each checkout (in a process of its own, its kformer first
on the path) translates the same test sentences, in batches of 32, greedily and with beam 4,
in every runtime: the Keras `Translator` (XLA, the default, and the plain graph loop), and
the SavedModel, TFLite, ONNX and CTranslate2 artifacts its own `kformer.export` writes.
The table then gives, runtime by runtime, how many sentences came out with other tokens
in this checkout than in the other; the script exits 1 if any did.

    git worktree add /tmp/before <commit>
    python bench/compare_checkouts.py --other /tmp/before --model kformer-demo --data builtin
    python bench/compare_checkouts.py --other /tmp/before --model MODEL --data ../shared/corpora/spa-eng/spa-eng.zip
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import checkouts  # bench/checkouts.py, beside this script

HERE = Path(__file__).resolve()
BEAMS = (1, 4)
BATCH = 32
SIDES = ("source", "target")


def test_sources(data, sentences):
    from kformer.data.corpus import builtin_splits
    from kformer.data.pairs import read_pairs, split_pairs

    test = builtin_splits()["test"] if data == "builtin" else split_pairs(read_pairs(data))["test"]
    return [source for source, _ in test[:sentences]]


def runtimes(trained, out, beam_size):
    """{runtime: ids (B, S) int32 -> output ids (B, T)} for one beam size, from the artifacts in `out`."""
    import numpy as np
    import onnxruntime
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    import kformer

    xla = kformer.Translator(trained, beam_size=beam_size)
    plain = kformer.Translator(trained, beam_size=beam_size, xla=False)
    saved = tf.saved_model.load(str(out / "saved_model" / "kformer" / "1")).signatures["translate_ids"]
    tflite = Interpreter(model_path=str(out / "tflite" / "translate_ids.tflite")).get_signature_runner()
    onnx = onnxruntime.InferenceSession(str(out / "onnx" / "translate_ids.onnx"))
    onnx_input = onnx.get_inputs()[0].name
    return {
        "Keras, XLA": lambda ids: xla.translate_ids(ids).numpy(),
        "Keras, graph loop": lambda ids: plain.translate_ids(ids).numpy(),
        "SavedModel": lambda ids: saved(encoder_tokens=tf.constant(ids))["output_tokens"].numpy(),
        "TFLite": lambda ids: np.asarray(tflite(encoder_tokens=ids)["output_tokens"]),
        "ONNX Runtime": lambda ids: onnx.run(["output_tokens"], {onnx_input: ids})[0],
    }


def ctranslate2_outputs(out, batches, manifest, beam_size, pieces):
    """CTranslate2's outputs (lists of pieces) with kformer's output limit for each batch (the
    export's own rule, read from its manifest by this checkout's export/wordpiece.py)."""
    import ctranslate2

    output_limit = checkouts.wordpiece().output_limit

    translator = ctranslate2.Translator(str(out / "ctranslate2"), device="cpu")
    outputs = []
    for ids in batches:
        limit = output_limit(manifest, ids.shape[1])
        sources = [[pieces["source"][i] for i in row if i] for row in ids]
        results = translator.translate_batch(sources, beam_size=beam_size, max_decoding_length=limit)
        outputs += [result.hypotheses[0] for result in results]
    return outputs


def translate_everywhere(model, data, sentences):
    """{f"{runtime}, beam {b}": [output pieces, ...]} in this process's kformer."""
    import tensorflow as tf

    import kformer
    from kformer.data.text import END_ID, PAD_ID
    from kformer.deploy import FORMATS
    from kformer.inference.translator import padded_tokens

    trained = kformer.load(model)
    sources = test_sources(data, sentences)
    batches = [
        padded_tokens(trained.source_tokenizer.tokenize(tf.constant(sources[i : i + BATCH]))).numpy()
        for i in range(0, len(sources), BATCH)
    ]
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for beam_size in BEAMS:
            out = Path(scratch) / f"beam{beam_size}"
            formats = FORMATS if beam_size == 1 else ("saved_model", "tflite", "onnx")
            manifest = kformer.export(trained, out, formats=formats, beam_size=beam_size, verbose=False)
            pieces = {side: (out / f"{side}_vocab.txt").read_text("utf-8").splitlines() for side in SIDES}

            def as_pieces(row, vocabulary=pieces["target"]):
                ids = list(row)
                for stop in (END_ID, PAD_ID):
                    ids = ids[: ids.index(stop)] if stop in ids else ids
                return [vocabulary[i] for i in ids]

            for name, run in runtimes(trained, out, beam_size).items():
                results[f"{name}, beam {beam_size}"] = [as_pieces(row) for ids in batches for row in run(ids)]
                print(f"  {name}, beam {beam_size}: done", file=sys.stderr, flush=True)
            ctranslate2_out = Path(scratch) / "beam1"  # CTranslate2 decodes by itself: one export, both beams
            results[f"CTranslate2, beam {beam_size}"] = ctranslate2_outputs(
                ctranslate2_out, batches, manifest, beam_size, pieces
            )
    return results


def run_checkout(checkout, args, output):
    data = args.data if args.data == "builtin" else str(Path(args.data).resolve())  # the worker runs in `checkout`
    arguments = [str(HERE), "--worker", str(output), "--model", str(Path(args.model).resolve()), "--data", data]
    checkouts.run(checkout, [*arguments, "--sentences", str(args.sentences)], check=True)
    return json.loads(output.read_text("utf-8"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--other", type=Path, help="the other kformer checkout")
    parser.add_argument("--model", required=True, help="a trained translator's model directory")
    parser.add_argument("--data", default="builtin", help="'builtin' or a pair file whose test split to translate")
    parser.add_argument("--sentences", type=int, default=512)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # write this process's outputs there
    args = parser.parse_args()
    if args.worker:
        args.worker.write_text(json.dumps(translate_everywhere(args.model, args.data, args.sentences)), "utf-8")
        return
    if args.other is None:
        parser.error("--other is required")
    with tempfile.TemporaryDirectory() as scratch:
        outputs = {}
        for who, checkout in (("this", checkouts.THIS), ("other", args.other.resolve())):
            print(f"{who} checkout ({checkout}) ...", file=sys.stderr, flush=True)
            outputs[who] = run_checkout(checkout, args, Path(scratch) / f"{who}.json")
    print(f"| runtime | sentences | other tokens than in {args.other} |\n| --- | --- | --- |")
    differences = 0
    for name, ours in outputs["this"].items():
        theirs = outputs["other"][name]
        differing = sum(a != b for a, b in zip(ours, theirs, strict=True))
        differences += differing
        print(f"| {name} | {len(ours)} | {differing} |")
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
