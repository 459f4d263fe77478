"""Decoding speed side by side: cached greedy, uncached greedy, keras-hub's GreedySampler, beam 4.

All contenders decode 40 output tokens with same-size models (d_model 256, 2+2 layers,
8 heads, d_ff 1024, 8000-token vocabularies) from the same 64 sources, randomly
initialised so no sentence stops early: the loop runs its 40 steps. Latency is per
sentence at batch 1; throughput is sentences per second at batch 64. Rounds alternate
between contenders so machine noise hits each alike.

With --model DIR --data FILE it also scores beam 4 against greedy (sacreBLEU, lowercased)
on the test split of a pair file, for a trained model directory.

    python bench/decode.py [--rounds 3]
    python bench/decode.py --model /tmp/kformer-bench-train/kformer --data ../shared/corpora/spa-eng/spa-eng.zip
"""

import argparse
import time

import keras
import numpy as np
import peer
import tensorflow as tf
from keras import ops

import kformer
from kformer.decoding import decode

D, HEADS, LAYERS, D_FF, VOCAB, OUTPUT_TOKENS = 256, 8, 2, 1024, 8000, 40


def kformer_contenders(model):
    def make(beam_size, use_cache):
        fn = tf.function(
            lambda tokens: decode(model, tokens, OUTPUT_TOKENS, beam_size=beam_size, use_cache=use_cache),
            input_signature=[tf.TensorSpec([None, None], tf.int32)],
        )
        return lambda tokens: fn(tokens).numpy()

    return {
        "kformer greedy, KV cache": make(1, True),
        "kformer greedy, no cache": make(1, False),
        "kformer beam 4, KV cache": make(4, True),
    }


def peer_contender(model):
    """keras-hub's GreedySampler as the keras.io example drives it: the whole model on the padded prompt each step."""
    sampler = keras_hub_sampler()

    def run(tokens):
        encoder_tokens = ops.pad(tokens, [[0, 0], [0, OUTPUT_TOKENS + 1 - tokens.shape[1]]])

        def next_token(prompt, cache, index):
            return model([encoder_tokens, prompt], training=False)[:, index - 1, :], None, cache

        prompt = ops.concatenate([ops.full((len(tokens), 1), 2), ops.zeros((len(tokens), OUTPUT_TOKENS), "int32")], 1)
        return ops.convert_to_numpy(sampler(next_token, prompt, stop_token_ids=None, index=1))

    return {"keras-hub GreedySampler": run}


def keras_hub_sampler():
    import keras_hub

    return keras_hub.samplers.GreedySampler()


def speed(rounds):
    keras.utils.set_random_seed(0)
    ours = kformer.build_transformer(VOCAB, VOCAB, d_model=D, num_heads=HEADS, num_layers=LAYERS, d_ff=D_FF)
    theirs = peer.model(
        VOCAB, VOCAB, d_model=D, num_heads=HEADS, num_layers=LAYERS, d_ff=D_FF, sequence_length=OUTPUT_TOKENS + 1
    )
    contenders = {**kformer_contenders(ours), **peer_contender(theirs)}
    sources = np.random.default_rng(0).integers(4, VOCAB, size=(64, 12)).astype("int32")
    batches = {"batch 1": sources[:1], "batch 64": sources}
    for run in contenders.values():  # trace and warm up
        for tokens in batches.values():
            run(tokens)
    seconds = {(name, batch): [] for name in contenders for batch in batches}
    for round_index in range(rounds):
        for name, run in contenders.items():
            for batch, tokens in batches.items():
                started = time.perf_counter()
                output = run(tokens)
                seconds[name, batch].append(time.perf_counter() - started)
                assert output.shape[1] >= OUTPUT_TOKENS, (name, output.shape)
        print(f"round {round_index + 1} done", flush=True)

    def best(name, batch="batch 64"):
        return min(seconds[name, batch])

    print(f"\n{OUTPUT_TOKENS} output tokens; best of {rounds} rounds")
    print(f"{'contender':<28}{'ms/sentence, batch 1':>22}{'sentences/s, batch 64':>23}")
    for name in contenders:
        print(f"{name:<28}{best(name, 'batch 1') * 1000:>22.0f}{64 / best(name):>23.1f}")
    cached, uncached = "kformer greedy, KV cache", "kformer greedy, no cache"
    print(f"\ncached vs uncached greedy: x{best(uncached) / best(cached):.2f} at batch 64, ", end="")
    print(f"x{best(uncached, 'batch 1') / best(cached, 'batch 1'):.2f} at batch 1")
    print(f"beam 4 / greedy time, batch 64: x{best('kformer beam 4, KV cache') / best(cached):.2f}")
    print(f"cached greedy vs keras-hub GreedySampler, batch 64: x{best('keras-hub GreedySampler') / best(cached):.2f}")


def quality(model_dir, data):
    from kformer.data import read_pairs, split_pairs
    from kformer.evaluation import score

    test = split_pairs(read_pairs(data))["test"]
    references = [t for _, t in test]
    for beam_size in (1, 4):
        started = time.perf_counter()
        hypotheses = kformer.Translator(model_dir, beam_size=beam_size).translate([s for s, _ in test])
        result = score(hypotheses, references, lowercase=True)
        print(f"beam {beam_size}: {result} in {time.perf_counter() - started:.0f} s", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", help="a trained model directory, to score beam 4 against greedy")
    parser.add_argument("--data", help="the pair file whose test split to score on")
    args = parser.parse_args()
    if args.model:
        quality(args.model, args.data)
    else:
        speed(args.rounds)


if __name__ == "__main__":
    main()
