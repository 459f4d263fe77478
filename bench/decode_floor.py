"""The floor under batch-1 cached greedy decoding: how fast this machine streams the weights a step reads.

A cached greedy step at batch 1 does a few MFLOP but reads every decoder weight it
uses: all of them except the cross-attention keys/values (computed once a sentence)
and the embedding tables (one row a step), about 15 MiB in float32 for the model of
bench/decode.py. This script measures, in one process, rounds alternating:

1. the Translator (XLA greedy, batch 1) with 1, 10, 20 and 40 steps: the cost of a call
   and of a step;
2. the uncached loop over 40 steps (bench/decode.py's "no cache");
3. an XLA while loop of 40 two-row products over N MiB of weights a step (N = 4, 8, 16,
   32, and the model's own step bytes): how fast XLA's loop can read them;
4. the model's step bytes read 40 times by NumPy's matrix-vector product (OpenBLAS,
   one thread a call), all on one thread or split over two: what the cores allow.

It prints the floor of a 40-step call (the 1-step call plus 39 steps that do nothing
but read the step's weights at the speed of 3, then of 4 on two threads) and the
largest cached/uncached ratio each floor allows on this machine.

    python bench/decode_floor.py [--rounds 20]
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads it: a call on one core, threads split

import argparse  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kformer  # noqa: E402
from kformer.data.text import RESERVED_TOKENS, Tokenizer  # noqa: E402

D, HEADS, LAYERS, D_FF, VOCAB, STEPS = 256, 8, 2, 1024, 8000, 40
MIB = 2**20


def step_bytes(model):
    """The float32 bytes a cached decoder step reads: the decoder's weights less cross K/V and the embeddings."""
    skipped = ("cross_attention/key", "cross_attention/value", "embedding")
    weights = [w for w in model.weights if w.path.startswith("decoder/") and not any(s in w.path for s in skipped)]
    return sum(int(np.prod(w.shape)) * 4 for w in weights)


def streaming_loop(mebibytes):
    """40 steps, each a (2, 256) product with every one of `mebibytes` MiB of (256, 2048) kernels."""
    rng = np.random.default_rng(0)
    kernels = [tf.Variable(rng.standard_normal((256, 2048)).astype("float32") * 0.02) for _ in range(mebibytes // 2)]

    @tf.function(jit_compile=True)
    def run(h):
        def body(i, h):
            total = h
            for kernel in kernels:
                total = total + tf.matmul(h, kernel)[:, :256]
            return i + 1, tf.tanh(total)

        return tf.while_loop(lambda i, _: i < STEPS, body, (0, h))[1]

    return lambda: run(tf.ones((2, 256))).numpy()


def numpy_stream(mebibytes, threads):
    """40 passes over `mebibytes` MiB of (N, 256) float32 matrices, each a matrix-vector product, on `threads`."""
    rows = round(mebibytes * MIB / 4 / 256 / threads)
    rng = np.random.default_rng(0)
    matrices = [rng.standard_normal((rows, 256)).astype("float32") for _ in range(threads)]
    vector = np.ones(256, "float32")

    def stream(matrix, start):
        start.wait()
        for _ in range(STEPS):
            matrix @ vector

    def run():
        start = threading.Barrier(threads)
        workers = [threading.Thread(target=stream, args=(matrix, start)) for matrix in matrices]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    model = kformer.build_transformer(VOCAB, VOCAB, d_model=D, num_heads=HEADS, num_layers=LAYERS, d_ff=D_FF)
    vocabulary = Tokenizer(RESERVED_TOKENS + [f"w{i}" for i in range(VOCAB - len(RESERVED_TOKENS))])
    source = np.random.default_rng(0).integers(4, VOCAB, size=(1, 12)).astype("int32")

    def translator(steps, **settings):
        trained = kformer.TrainedModel(model, vocabulary, vocabulary, {"max_length": steps})
        made = kformer.Translator(trained, **settings)  # held by the lambda: its tf.function refers to it weakly
        return lambda: made.translate_ids(source).numpy()

    model_mib = step_bytes(model) / MIB
    contenders = {f"cached, {n} steps": translator(n) for n in (1, 10, 20, STEPS)}
    contenders[f"no cache, {STEPS} steps"] = translator(STEPS, use_cache=False)
    sizes = [4, 8, 16, 32, 2 * round(model_mib / 2)]
    contenders.update({f"streaming {n} MiB a step": streaming_loop(n) for n in sizes})
    contenders.update({f"numpy, {t} thread(s), {sizes[-1]} MiB": numpy_stream(sizes[-1], t) for t in (1, 2)})
    for run in contenders.values():  # trace, compile, warm up
        run(), run()
    seconds = {name: [] for name in contenders}
    for round_index in range(args.rounds):
        for name, run in contenders.items():
            started = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - started)
        print(f"round {round_index + 1} done", flush=True)

    best = {name: min(times) * 1000 for name, times in seconds.items()}
    print(f"\nbest of {args.rounds} rounds, batch 1; a cached step reads {model_mib:.1f} MiB of float32 weights")
    for name, ms in best.items():
        if name.startswith(("streaming", "numpy")):
            mib = int(name.split(" MiB")[0].split()[-1])
            print(f"{name:<28}{ms / STEPS * 1000:9.1f} us a step  {mib / 1024 / (ms / STEPS / 1000):6.1f} GiB/s")
        else:
            print(f"{name:<28}{ms:9.2f} ms")
    per_step = (best[f"cached, {STEPS} steps"] - best["cached, 1 steps"]) / (STEPS - 1)
    stream = best[f"streaming {sizes[-1]} MiB a step"] / STEPS * model_mib / sizes[-1]  # ms to read one step's weights
    two_cores = best[f"numpy, 2 thread(s), {sizes[-1]} MiB"] / STEPS * model_mib / sizes[-1]
    floor = best["cached, 1 steps"] + (STEPS - 1) * stream
    floor_two_cores = best["cached, 1 steps"] + (STEPS - 1) * two_cores
    uncached = best[f"no cache, {STEPS} steps"]
    print(
        f"\ncached step: {per_step * 1000:.0f} us measured; {stream * 1000:.0f} us to stream its weights in "
        f"XLA's loop, {two_cores * 1000:.0f} us on two cores"
    )
    print(
        f"{STEPS}-step call: {best[f'cached, {STEPS} steps']:.2f} ms measured, floor {floor:.2f} ms "
        f"({floor_two_cores:.2f} ms on two cores)"
    )
    print(
        f"cached vs uncached: x{uncached / best[f'cached, {STEPS} steps']:.2f} measured, "
        f"at most x{uncached / floor:.2f} at XLA's floor, x{uncached / floor_two_cores:.2f} on two cores"
    )


if __name__ == "__main__":
    main()
