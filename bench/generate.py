"""Language-model generation speed: tokens per second, with and without the KV cache.

The decoder-only model at the translator benchmark's size (d_model 256, 2 layers,
8 heads, d_ff 1024, an 8000-token vocabulary), randomly initialised, continues
8-token prompts by 40 tokens, greedily (`kformer.Generator`, stop token [UNK], which
a random model does not produce first, so every row runs the full 40 steps). Tokens/s
count generated tokens only, at batch 1 and batch 32, best of the rounds. Rounds
alternate between the cached and uncached generators so machine noise hits both alike.

    python bench/generate.py [--rounds 3]
"""

import argparse
import time

import numpy as np
import tensorflow as tf

import kformer
from kformer.data.text import RESERVED_TOKENS, Tokenizer
from kformer.model_dir import TrainedModel

D, HEADS, LAYERS, D_FF, VOCAB, PROMPT, NEW_TOKENS = 256, 8, 2, 1024, 8000, 8, 40


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    vocabulary = RESERVED_TOKENS + [f"w{i}" for i in range(VOCAB - len(RESERVED_TOKENS))]
    model = kformer.build_decoder_only(VOCAB, d_model=D, num_heads=HEADS, num_layers=LAYERS, d_ff=D_FF, dropout=0.0)
    trained = TrainedModel(model, None, Tokenizer(vocabulary), {"kind": "language_model", "max_length": 64})
    generators = {
        "KV cache": kformer.Generator(trained, max_new_tokens=NEW_TOKENS, stop_token="[UNK]"),
        "no cache": kformer.Generator(trained, max_new_tokens=NEW_TOKENS, stop_token="[UNK]", use_cache=False),
    }
    rng = np.random.default_rng(0)
    prompts = {batch: tf.constant(rng.integers(4, VOCAB, (batch, PROMPT)), tf.int32) for batch in (1, 32)}
    outputs = {}
    for name, generator in generators.items():  # trace once, outside the timing
        outputs[name] = {batch: generator.generate_ids(p).numpy() for batch, p in prompts.items()}
    same = all(np.array_equal(outputs["KV cache"][b], outputs["no cache"][b]) for b in prompts)
    rates = {(name, batch): 0.0 for name in generators for batch in prompts}
    for _ in range(args.rounds):
        for name, generator in generators.items():
            for batch, prompt in prompts.items():
                started = time.perf_counter()
                ids = generator.generate_ids(prompt).numpy()
                rate = (ids != 0).sum() / (time.perf_counter() - started)
                rates[name, batch] = max(rates[name, batch], rate)
    print(f"{'generator':<12}{'tokens/s, batch 1':>20}{'tokens/s, batch 32':>21}")
    for name in generators:
        print(f"{name:<12}{rates[name, 1]:>20.0f}{rates[name, 32]:>21.0f}")
    for batch in prompts:
        print(f"cache speed-up at batch {batch}: {rates['KV cache', batch] / rates['no cache', batch]:.2f}x")
    print(f"cached and uncached tokens identical: {same}")


if __name__ == "__main__":
    main()
