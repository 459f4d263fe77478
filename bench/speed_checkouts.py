"""Training-step time and decoding speed: this checkout against another, in one run.

Two worker processes, one per checkout (its kformer first on the path), build the same
randomly initialised model (d_model 256, 2+2 layers, 8 heads, d_ff 1024, 8000-token
vocabularies) and warm up. Then rounds alternate between them, one worker running at a
time, so machine noise hits both alike. A round times, in each worker:

- 10 training steps (`train_on_batch`, XLA, batch 64, 40 tokens a side, no padding);
- decoding 40 tokens (a random model never stops early) from the same 64 sources with
  the `Translator`, greedy and beam 4, XLA (the default) and the plain graph loop, at
  batch 1 (one sentence) and batch 64.

The table gives the best round of each, and this checkout's time over the other's.

With `--model DIR --data FILE` the decoding contenders use that trained translator on the
first 64 sentences of FILE's test split (as `compare_checkouts.py` picks them) instead of
the random model: real sentences stop early, so the buffers' length counts as it does in use; and
the XLA ones also text in, text out (`translator(texts)`: tokenizing, splitting lines into sentences
where the checkout does, detokenizing).

    git worktree add /tmp/before <commit>
    python bench/speed_checkouts.py --other /tmp/before [--rounds 5] [--only "greedy, XLA"]
    python bench/speed_checkouts.py --other /tmp/before --model spa --data spa-eng.zip --only "graph loop"
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import checkouts  # bench/checkouts.py, beside this script

HERE = Path(__file__).resolve()
D, HEADS, LAYERS, D_FF, VOCAB, BATCH, LENGTH = 256, 8, 2, 1024, 8000, 64, 40
TRAIN_STEPS = 10


def contenders(only="", model_dir=None, sentences=None):
    """{name: run()} for this process's kformer (those whose name holds `only`), each traced and warmed up.

    With `model_dir`: that translator decoding `sentences`, and no training step.
    """
    import keras
    import numpy as np
    import tensorflow as tf

    import kformer

    runs = {}
    if model_dir is not None:
        trained = kformer.load(model_dir)
        sources = trained.source_tokenizer.tokenize(tf.constant(sentences)).to_tensor().numpy()
    else:
        from kformer.data.text import RESERVED_TOKENS, Tokenizer
        from kformer.training.objectives import MaskedSparseCrossEntropy, TransformerSchedule

        keras.utils.set_random_seed(0)
        model = kformer.build_transformer(VOCAB, VOCAB, d_model=D, num_heads=HEADS, num_layers=LAYERS, d_ff=D_FF)
        rng = np.random.default_rng(0)
        sources, targets, labels = (rng.integers(4, VOCAB, size=(BATCH, LENGTH)).astype("int32") for _ in range(3))
        trainee = kformer.build_transformer(VOCAB, VOCAB, d_model=D, num_heads=HEADS, num_layers=LAYERS, d_ff=D_FF)
        optimizer = keras.optimizers.Adam(TransformerSchedule(D, 4000), beta_1=0.9, beta_2=0.98, epsilon=1e-9)
        trainee.compile(optimizer, MaskedSparseCrossEntropy(0.1), jit_compile=True)

        def train():
            for _ in range(TRAIN_STEPS):
                trainee.train_on_batch((sources, targets), labels)

        vocabulary = Tokenizer(RESERVED_TOKENS + [f"w{i}" for i in range(VOCAB - len(RESERVED_TOKENS))])
        trained = kformer.TrainedModel(model, vocabulary, vocabulary, {"max_length": LENGTH})
        runs[f"train, {TRAIN_STEPS} steps of batch {BATCH}"] = train
    for beam_size in (1, 4):
        for xla in (True, False):
            translator = kformer.Translator(trained, beam_size=beam_size, xla=xla)
            for batch in (1, BATCH):
                name = f"{'greedy' if beam_size == 1 else 'beam 4'}, {'XLA' if xla else 'graph loop'}, batch {batch}"
                runs[name] = lambda t=translator, ids=sources[:batch]: t.translate_ids(ids).numpy()
                if model_dir is not None and xla:  # text in, text out: tokenizing, splitting and joining too
                    texts = tf.constant(sentences[:batch])
                    runs[name.replace("XLA", "XLA, text")] = lambda t=translator, x=texts: t(x).numpy()
    runs = {name: run for name, run in runs.items() if only in name}
    for run in runs.values():
        run()
    return runs


def worker(only, model_dir=None, sentences_file=None):
    """Warms up, then times one round of every contender for each line read, answering with JSON."""
    sentences = json.loads(Path(sentences_file).read_text()) if sentences_file else None
    runs = contenders(only, model_dir, sentences)
    print(json.dumps(list(runs)), flush=True)
    for _ in sys.stdin:
        seconds = {}
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            seconds[name] = time.perf_counter() - started
        print(json.dumps(seconds), flush=True)


def start(checkout, only, real=()):
    arguments = [str(HERE), "--worker", "--only", only, *real]
    process = checkouts.start(checkout, arguments, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    json.loads(process.stdout.readline())  # warmed up
    return process


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--other", type=Path, help="the other kformer checkout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="", help="time only the contenders whose name holds this, e.g. 'XLA'")
    parser.add_argument("--model", help="a trained translator's model directory (with --data)")
    parser.add_argument("--data", help="'builtin' or a pair file whose test split's first 64 sentences to decode")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sentences-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.only, args.model, args.sentences_file)
    if args.other is None:
        parser.error("--other is required")
    real = ()
    if args.model:
        from compare_checkouts import test_sources  # beside this script, on the path as its folder

        sentences_file = Path(tempfile.mkdtemp()) / "sentences.json"
        sentences_file.write_text(json.dumps(test_sources(args.data or "builtin", BATCH)))
        real = ("--model", str(Path(args.model).resolve()), "--sentences-file", str(sentences_file))
    workers = {}
    for who, checkout in {"this": checkouts.THIS, "other": args.other}.items():  # one at a time: compiling
        print(f"warming up {who} ({checkout}) ...", file=sys.stderr, flush=True)
        workers[who] = start(checkout, args.only, real)
    rounds = {who: [] for who in workers}
    for round_index in range(args.rounds):
        for who, process in workers.items():
            process.stdin.write("go\n")
            process.stdin.flush()
            rounds[who].append(json.loads(process.stdout.readline()))
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    for process in workers.values():
        process.stdin.close()
        process.wait()
    print(f"best of {args.rounds} rounds, seconds\n")
    print(f"| contender | this checkout | {args.other} | this / other |\n| --- | --- | --- | --- |")
    for name in rounds["this"][0]:
        this, other = (min(r[name] for r in rounds[who]) for who in ("this", "other"))
        print(f"| {name} | {this:.3f} | {other:.3f} | {this / other:.2f} |")


if __name__ == "__main__":
    main()
