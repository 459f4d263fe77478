"""What the translator's extra outputs cost: n-best lists, scores and a forced prefix, against plain translation.

On the first 512 sentences of a pair file's test split (or the built-in one), in one process, rounds
alternating between contenders, best of --rounds each, batches of 64:

- greedy: `translate(texts)`; with `with_scores=True` (a softmax normaliser a step); with a
  `prefix` (each reference's first word, as autocomplete would give it);
- beam 4: `translate(texts)`; with `n_best=4, with_scores=True` (every beam settled, not only the best).

Alignments have their own script (bench/alignments.py). Each ratio is the contender's time over plain
translation's at the same beam size.

    python bench/outputs.py --model kformer-demo --data builtin
    python bench/outputs.py --model MODEL --data ../shared/corpora/spa-eng/spa-eng.zip
"""

import argparse
import time

import kformer
from kformer.data.pairs import read_pairs, split_pairs

SENTENCES = 512


def contenders(model, data):
    test = (kformer.builtin_splits() if data == "builtin" else split_pairs(read_pairs(data)))["test"][:SENTENCES]
    sources = [source for source, _ in test]
    prefixes = [target.split()[0] for _, target in test]
    greedy, beam = kformer.Translator(model), kformer.Translator(model, beam_size=4)
    return {
        "greedy": lambda: greedy.translate(sources),
        "greedy, with scores": lambda: greedy.translate(sources, with_scores=True),
        "greedy, a prefix": lambda: greedy.translate(sources, prefix=prefixes),
        "beam 4": lambda: beam.translate(sources),
        "beam 4, n-best 4 with scores": lambda: beam.translate(sources, n_best=4, with_scores=True),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", default="builtin")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs = contenders(args.model, args.data)
    for run in runs.values():  # traced and compiled before the clock starts
        run()
    best = dict.fromkeys(runs, float("inf"))
    for round_index in range(args.rounds):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - started)
        print(f"round {round_index + 1}/{args.rounds} done", flush=True)
    print(f"\n{SENTENCES} sentences, batches of 64, best of {args.rounds} rounds\n")
    print("| contender | seconds | over plain |\n| --- | --- | --- |")
    for name, seconds in best.items():
        plain = best["beam 4" if name.startswith("beam") else "greedy"]
        print(f"| {name} | {seconds:.2f} | {seconds / plain:.2f} |")


if __name__ == "__main__":
    main()
