"""Training throughput at equal size: kformer vs the keras-hub peer, side by side in one run.

Same model size (d_model 256, 2+2 layers, 8 heads, d_ff 1024, 8000-token vocabularies),
same batch (64) and sequence length (40 tokens a side, no padding), same optimizer and
data. kformer runs twice: with its recipe's label-smoothed loss and with the peer's loss
(plain cross-entropy, padding ignored), so that the loss is equal too. Rounds alternate
between the contenders so machine noise hits each alike. Also
prints the float32 matmul peak measured in the same run and each model's utilisation.

With `--data`, each contender instead trains on batches of real pairs from its own
pipeline (kformer: length buckets; the peer: the keras.io example's padding of every
sentence to 40 tokens), and the utilisation counts only the matmul work of real,
non-padding tokens: what the padding costs shows up as a lower fraction of the peak.

    python bench/throughput.py [--rounds 3] [--steps 20]
    python bench/throughput.py --data ../shared/corpora/spa-eng/spa-eng.zip
"""

import argparse
import time

import keras
import numpy as np
import peer
import tensorflow as tf

import kformer
from kformer.training.objectives import MaskedSparseCrossEntropy, TransformerSchedule

D, HEADS, LAYERS, D_FF, VOCAB, BATCH, LENGTH = 256, 8, 2, 1024, 8000, 64, 40


def matmul_peak(size=2048, repeats=10):
    """Best float32 GFLOP/s of one size x size matmul through TensorFlow."""
    a = tf.random.normal((size, size))
    multiply = tf.function(lambda x: tf.matmul(x, x))
    multiply(a).numpy()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        multiply(a).numpy()
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e9


def pair_flops(s, t):
    """Matmul FLOPs of training on one pair (forward x 3) with s source and t target tokens."""
    encoder = 2 * (4 * s * D * D + 2 * s * s * D + 2 * s * D * D_FF)
    decoder = 2 * (4 * t * D * D + 2 * t * t * D + 2 * t * D * D + 2 * s * D * D + 2 * t * s * D + 2 * t * D * D_FF)
    output = 2 * t * D * VOCAB
    return 3 * (LAYERS * (encoder + decoder) + output)


def training_flops_per_step():
    """Matmul FLOPs of one training step, encoder-decoder, no padding."""
    return BATCH * pair_flops(LENGTH, LENGTH)


def real_flops(batch):
    """Matmul FLOPs of the real (non-padding) tokens of a ((encoder, decoder), labels) batch."""
    (encoder_tokens, _), labels = batch
    sources, targets = np.count_nonzero(encoder_tokens, axis=1), np.count_nonzero(labels, axis=1)
    return sum(pair_flops(int(s), int(t)) for s, t in zip(sources, targets, strict=True))


def real_batches(path, count):
    """`count` training batches of real pairs from each contender's own pipeline (vocabularies of ~8000)."""
    from kformer.data.pairs import read_pairs, split_pairs
    from kformer.data.pipeline import make_dataset
    from kformer.data.text import Tokenizer, build_vocabulary

    train = split_pairs(read_pairs(path))["train"]
    ours = [Tokenizer(build_vocabulary([pair[side] for pair in train], VOCAB)) for side in (0, 1)]
    theirs = peer.tokenizers(train, VOCAB)
    take = lambda dataset: [tuple(map(_numpy, batch)) for batch in dataset.take(count)]  # noqa: E731
    return {
        "kformer": take(make_dataset(train, *ours, batch_size=BATCH, seed=0)),
        "keras-hub peer": take(peer.dataset(train, *theirs, batch_size=BATCH)),
    }


def _numpy(part):
    return tuple(x.numpy() for x in part) if isinstance(part, tuple) else part.numpy()


def contenders():
    optimizer = lambda: keras.optimizers.Adam(TransformerSchedule(D, 4000), beta_1=0.9, beta_2=0.98, epsilon=1e-9)  # noqa: E731
    models = {}
    for smoothing, name in ((0.1, "kformer (XLA, its default)"), (0.0, "kformer (XLA, the peer's loss)")):
        ours = kformer.build_transformer(VOCAB, VOCAB, d_model=D, num_heads=HEADS, num_layers=LAYERS, d_ff=D_FF)
        ours.compile(optimizer(), MaskedSparseCrossEntropy(smoothing), jit_compile=True)
        models[name] = ours
    for jit in (False, True):
        theirs = peer.model(VOCAB, VOCAB, d_model=D, num_heads=HEADS, num_layers=LAYERS, d_ff=D_FF)
        theirs.compile(
            optimizer(), keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0), jit_compile=jit
        )
        models[f"keras-hub peer ({'XLA' if jit else 'default compile'})"] = theirs
    return models


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="steps a round (with --data: batches)")
    parser.add_argument("--data", help="spa-eng.zip: real batches, utilisation counting real tokens only")
    args = parser.parse_args()
    models = contenders()
    if args.data:
        real = real_batches(args.data, args.steps)
        batches = {name: real[name.split(" (")[0]] for name in models}
        flops = {name: sum(map(real_flops, batches[name])) for name in models}
    else:
        rng = np.random.default_rng(0)
        tokens = [rng.integers(4, VOCAB, size=(BATCH, LENGTH)).astype("int32") for _ in range(3)]
        synthetic = [((tokens[0], tokens[1]), tokens[2])] * args.steps
        batches = dict.fromkeys(models, synthetic)
        flops = dict.fromkeys(models, training_flops_per_step() * args.steps)
    real_tokens = {name: sum(np.count_nonzero(labels) for _, labels in batches[name]) for name in models}
    for name, model in models.items():
        for x, y in batches[name]:  # compile (each bucket's shape) and warm up
            model.train_on_batch(x, y)
    seconds = {name: [] for name in models}
    peaks = []
    for round_index in range(args.rounds):
        peaks.append(matmul_peak())
        for name, model in models.items():
            started = time.perf_counter()
            for x, y in batches[name]:
                model.train_on_batch(x, y)
            seconds[name].append(time.perf_counter() - started)
        print(f"round {round_index + 1}: " + ", ".join(f"{n}: {s[-1]:.1f} s" for n, s in seconds.items()))
    peak = max(peaks)
    print(f"\nfloat32 matmul peak (2048x2048, best of run): {peak:.0f} GFLOP/s")
    what = "real pairs, matmul work of non-padding tokens only" if args.data else f"{LENGTH} tokens a side, no padding"
    print(f"{args.steps} steps of batch {BATCH} a round ({what}), best round\n")
    baseline = "keras-hub peer (default compile)"
    print(f"{'model':<36}{'ms/step':>9}{'real tok/s':>12}{'GFLOP/s':>9}{'of peak':>9}{'speed-up':>10}")
    for name, times in seconds.items():
        best = min(times)
        rate = flops[name] / best / 1e9
        speed_up = (real_tokens[name] / best) / (real_tokens[baseline] / min(seconds[baseline]))
        print(
            f"{name:<36}{best / len(batches[name]) * 1000:>9.0f}{real_tokens[name] / best:>12.0f}{rate:>9.0f}"
            f"{rate / peak:>9.0%}{speed_up:>9.2f}x"
        )


if __name__ == "__main__":
    main()
