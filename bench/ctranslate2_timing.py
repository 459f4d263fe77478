"""CTranslate2 timed in a process of its own, as it is deployed (bench/export.py runs this).

In a process where TensorFlow has run, CTranslate2's OpenMP threads compete with
TensorFlow's spinning thread pools: measured 13 ms a sentence instead of 1.1 ms.

    python bench/ctranslate2_timing.py MODEL_DIR THREADS [ROUNDS] < request.json > result.json

The request is {"singles": [[piece, ...], ...], "single_limits": [...], "batches":
[[[piece, ...], ...], ...], "max_lengths": [...]} (an output limit for each single and each batch);
the result is {"latency_ms", "throughput", "outputs": [[piece, ...], ...]} (the batches' outputs),
the best of ROUNDS (default 1) timings each.
"""

import json
import sys
import time

import ctranslate2


def main():
    model_dir, threads = sys.argv[1], int(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    request = json.load(sys.stdin)
    translator = ctranslate2.Translator(model_dir, device="cpu", intra_threads=threads, inter_threads=1)

    def run(batch, max_length):
        return translator.translate_batch(batch, beam_size=1, max_decoding_length=max_length)

    singles = [(pieces, limit) for pieces, limit in zip(request["singles"], request["single_limits"], strict=True)]
    batches = list(zip(request["batches"], request["max_lengths"], strict=True))
    for pieces, limit in singles:
        run([pieces], limit)  # warm up
    latency, throughput = float("inf"), 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        for pieces, limit in singles:
            run([pieces], limit)
        latency = min(latency, (time.perf_counter() - started) / len(singles) * 1000)
        started = time.perf_counter()
        results = [run(batch, limit) for batch, limit in batches]
        throughput = max(throughput, sum(len(batch) for batch, _ in batches) / (time.perf_counter() - started))
    outputs = [r.hypotheses[0] for result in results for r in result]
    json.dump({"latency_ms": latency, "throughput": throughput, "outputs": outputs}, sys.stdout)


if __name__ == "__main__":
    main()
