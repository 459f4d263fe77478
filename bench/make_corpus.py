"""Writes a large pair corpus made from the shared spa-eng pairs, for the streaming benchmarks (issue 29).

Each line joins two pairs drawn at random: "s1 s2<TAB>t1 t2", so the text is
real and about twice Tatoeba's sentence length (`--join 3`: three, for long pairs).
Lines = the size asked for; the same seed gives the same file.

    python3 bench/make_corpus.py 1000000 /tmp/corpora/pairs-1m.tsv [--gzip]
    python3 bench/make_corpus.py 120000 /tmp/corpora/long-120k.tsv --join 3
"""

import argparse
import gzip
import random
import time

from kformer.data.pairs import read_pairs

SPA_ENG = "../shared/corpora/spa-eng/spa-eng.zip"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lines", type=int)
    parser.add_argument("out")
    parser.add_argument("--source", default=SPA_ENG)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gzip", action="store_true", help="write it gzip-compressed")
    parser.add_argument("--join", type=int, default=2, help="pairs joined a line (default: %(default)s)")
    args = parser.parse_args()
    pairs = read_pairs(args.source)
    rng = random.Random(args.seed)
    started = time.perf_counter()
    opener = gzip.open if args.gzip else open
    with opener(args.out, "wt", encoding="utf-8") as out:
        for done in range(args.lines):
            joined = [rng.choice(pairs) for _ in range(args.join)]
            out.write(" ".join(s for s, _ in joined) + "\t" + " ".join(t for _, t in joined) + "\n")
            if done and done % 1_000_000 == 0:
                print(f"{done:,} lines ({time.perf_counter() - started:.0f} s)", flush=True)
    print(f"Wrote {args.lines:,} lines to {args.out} in {time.perf_counter() - started:.0f} s.")


if __name__ == "__main__":
    main()
