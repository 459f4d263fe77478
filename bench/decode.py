"""Decoding speed side by side: kformer's Translator (XLA and graph loop, greedy and beam 4, no
cache) and keras-hub's GreedySampler.

All contenders decode 40 output tokens with same-size models (d_model 256, 2+2 layers,
8 heads, d_ff 1024, 8000-token vocabularies) from the same 64 sources, randomly
initialised so no sentence stops early: the loop runs its 40 steps. Latency is per
sentence at batch 1; throughput is sentences per second at batch 64. Rounds alternate
between contenders so machine noise hits each alike.

With --model DIR --data FILE it instead scores beam 4 against greedy (sacreBLEU, lowercased)
on the test (or --split valid) split of a pair file, for a trained model directory, with
the kformer first on the path (PYTHONPATH=/tmp/before for another checkout's).

    python bench/decode.py [--rounds 3]
    python bench/decode.py --model /tmp/kformer-bench-train/kformer --data ../shared/corpora/spa-eng/spa-eng.zip
"""

import argparse
import time

import keras
import numpy as np
import peer
from keras import ops

import kformer
from kformer.data.text import RESERVED_TOKENS, Tokenizer

D, HEADS, LAYERS, D_FF, VOCAB, OUTPUT_TOKENS = 256, 8, 2, 1024, 8000, 40


def kformer_contenders(model):
    """kformer's Translator as users call it (ids in, ids out): XLA (the default) and the plain graph loop."""
    vocabulary = Tokenizer(RESERVED_TOKENS + [f"w{i}" for i in range(VOCAB - len(RESERVED_TOKENS))])
    trained = kformer.TrainedModel(model, vocabulary, vocabulary, {"max_length": OUTPUT_TOKENS})

    def make(**settings):
        translator = kformer.Translator(trained, **settings)
        return lambda tokens: translator.translate_ids(tokens).numpy()

    return {
        "kformer greedy, XLA": make(),
        "kformer greedy, graph loop": make(xla=False),
        "kformer greedy, no cache": make(use_cache=False),
        "kformer beam 4, XLA": make(beam_size=4),
        "kformer beam 4, graph loop": make(beam_size=4, xla=False),
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
        print(f"{name:<28}{best(name, 'batch 1') * 1000:>22.1f}{64 / best(name):>23.1f}")
    cached, plain, uncached = "kformer greedy, XLA", "kformer greedy, graph loop", "kformer greedy, no cache"
    for batch in ("batch 1", "batch 64"):
        print(f"\n{batch}: XLA greedy vs no cache x{best(uncached, batch) / best(cached, batch):.2f}, ", end="")
        print(f"vs the graph loop x{best(plain, batch) / best(cached, batch):.2f}; ", end="")
        print(f"beam 4 / greedy (XLA) x{best('kformer beam 4, XLA', batch) / best(cached, batch):.2f}; ", end="")
        print(
            f"keras-hub GreedySampler / XLA greedy x{best('keras-hub GreedySampler', batch) / best(cached, batch):.2f}"
        )


def quality(model_dir, data, split):
    from kformer.data.pairs import read_pairs, split_pairs
    from kformer.training.evaluation import score

    pairs = split_pairs(read_pairs(data))[split]
    references = [t for _, t in pairs]
    print(f"kformer from {kformer.__file__}, the {split} split: {len(pairs):,} pairs", flush=True)
    for beam_size in (1, 4):
        translator = kformer.Translator(model_dir, beam_size=beam_size)
        translator.translate([s for s, _ in pairs[:64]])  # compiled before the clock starts
        started = time.perf_counter()
        hypotheses = translator.translate([s for s, _ in pairs])
        result = score(hypotheses, references, lowercase=True)
        print(f"beam {beam_size}: {result} in {time.perf_counter() - started:.1f} s", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", help="a trained model directory, to score beam 4 against greedy")
    parser.add_argument("--data", help="the pair file whose test split to score on")
    parser.add_argument("--split", choices=("valid", "test"), default="test", help="choose on valid, report test once")
    args = parser.parse_args()
    if args.model:
        quality(args.model, args.data, args.split)
    else:
        speed(args.rounds)


if __name__ == "__main__":
    main()
