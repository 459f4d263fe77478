"""Learning a translator's two vocabularies: side by side (the smaller in a process of its own) or one at a time.

A second process costs a TensorFlow import (seconds) before it learns anything, so it pays
only when the side it learns (the one of fewer distinct words) holds many;
`kformer.data.text.SIDE_BY_SIDE_FROM` draws that line. This times both ways on the built-in
corpus, on samples of the shared spa-eng corpus (skipped when absent) and, with --joined, on
the first 200,000 pairs of a `bench/make_corpus.py` file (what `kformer train` learns from a
large file), alternating, and gives the median of each and what the rule picks.

    python bench/vocab.py [--rounds 3] [--corpus ../shared/corpora/spa-eng/spa-eng.zip] [--joined FILE]
"""

import argparse
import itertools
import statistics
import time
from pathlib import Path

from kformer.data.corpus import builtin_splits
from kformer.data.pairs import PairFile, read_pairs
from kformer.data.text import SIDE_BY_SIDE_FROM, build_vocabularies

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "spa-eng" / "spa-eng.zip"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus", type=Path, default=SHARED)
    parser.add_argument("--joined", type=Path, help="a bench/make_corpus.py file: its first 200,000 pairs")
    args = parser.parse_args()
    cases = [("built-in, 300 tokens", builtin_splits()["train"], 300)]
    if args.corpus.is_file():
        pairs = read_pairs(args.corpus)
        sizes = (10_000, 30_000, 60_000, len(pairs))
        cases += [(f"spa-eng {n // 1000}k pairs, 8000 tokens", pairs[:n], 8000) for n in sizes]
    else:
        print(f"{args.corpus}: absent, so only the built-in corpus is timed.")
    if args.joined:
        joined = list(itertools.islice(iter(PairFile(args.joined)), 200_000))
        cases.append((f"{args.joined.name}, first 200k pairs, 8000 tokens", joined, 8000))
    print("| corpus | distinct source / target words | side by side (s) | one at a time (s) | the rule picks |")
    print("| --- | --- | --- | --- | --- |")
    for name, pairs, size in cases:
        corpora = [([s for s, _ in pairs], size), ([t for _, t in pairs], size)]
        times = {0: [], 10**12: []}  # side_by_side_from: always a process, never
        for _ in range(args.rounds):
            for threshold, spent in times.items():
                start = time.perf_counter()
                build_vocabularies(corpora, side_by_side_from=threshold)
                spent.append(time.perf_counter() - start)
        words = [len({word for text in sentences for word in text.split()}) for sentences, _ in corpora]
        picked = "side by side" if min(words) >= SIDE_BY_SIDE_FROM else "one at a time"
        apart, together = (statistics.median(times[t]) for t in (0, 10**12))
        print(f"| {name} | {words[0]:,} / {words[1]:,} | {apart:.2f} | {together:.2f} | {picked} |", flush=True)


if __name__ == "__main__":
    main()
