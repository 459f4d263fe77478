"""Training throughput at equal size: kformer vs the keras-hub peer, side by side in one run.

Same model size (d_model 256, 2+2 layers, 8 heads, d_ff 1024, 8000-token vocabularies),
same batch (64) and sequence length (40 tokens a side, no padding), same optimizer and
data. Rounds alternate between the contenders so machine noise hits each alike. Also
prints the float32 matmul peak measured in the same run and each model's utilisation.

    python bench/throughput.py [--rounds 3] [--steps 20]
"""

import argparse
import time

import keras
import numpy as np
import peer
import tensorflow as tf

import kformer
from kformer.training import MaskedSparseCrossEntropy, TransformerSchedule

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


def training_flops_per_step():
    """Matmul FLOPs of one training step (forward x 3), encoder-decoder, no padding."""
    s = t = LENGTH
    encoder = 2 * (4 * s * D * D + 2 * s * s * D + 2 * s * D * D_FF)
    decoder = 2 * (4 * t * D * D + 2 * t * t * D + 2 * t * D * D + 2 * s * D * D + 2 * t * s * D + 2 * t * D * D_FF)
    output = 2 * t * D * VOCAB
    return 3 * BATCH * (LAYERS * (encoder + decoder) + output)


def contenders():
    optimizer = lambda: keras.optimizers.Adam(TransformerSchedule(D, 4000), beta_1=0.9, beta_2=0.98, epsilon=1e-9)  # noqa: E731
    models = {}
    ours = kformer.build_transformer(VOCAB, VOCAB, d_model=D, num_heads=HEADS, num_layers=LAYERS, d_ff=D_FF)
    ours.compile(optimizer(), MaskedSparseCrossEntropy(0.1), jit_compile=True)
    models["kformer (XLA, its default)"] = ours
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
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    batch = [rng.integers(4, VOCAB, size=(BATCH, LENGTH)).astype("int32") for _ in range(3)]
    x, y = (batch[0], batch[1]), batch[2]
    models = contenders()
    for model in models.values():
        model.train_on_batch(x, y)  # compile and warm up
    seconds = {name: [] for name in models}
    peaks = []
    for round_index in range(args.rounds):
        peaks.append(matmul_peak())
        for name, model in models.items():
            started = time.perf_counter()
            for _ in range(args.steps):
                model.train_on_batch(x, y)
            seconds[name].append((time.perf_counter() - started) / args.steps)
        print(f"round {round_index + 1}: " + ", ".join(f"{n}: {s[-1] * 1000:.0f} ms" for n, s in seconds.items()))
    peak = max(peaks)
    flops = training_flops_per_step()
    print(f"\nfloat32 matmul peak (2048x2048, best of run): {peak:.0f} GFLOP/s")
    print(f"matmul work per training step: {flops / 1e9:.1f} GFLOP (batch {BATCH}, {LENGTH} tokens a side)\n")
    baseline = min(seconds["keras-hub peer (default compile)"])
    print(f"{'model':<36}{'ms/step':>9}{'GFLOP/s':>9}{'of peak':>9}{'speed-up':>10}")
    for name, times in seconds.items():
        best = min(times)
        rate = flops / best / 1e9
        print(f"{name:<36}{best * 1000:>9.0f}{rate:>9.0f}{rate / peak:>9.0%}{baseline / best:>9.2f}x")


if __name__ == "__main__":
    main()
