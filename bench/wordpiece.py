"""kformer's WordPiece learning against tensorflow-text's own, on the same sentences: time, probes, equality.

`kformer.data.text.build_vocabulary` takes tensorflow-text's learner's path
but skips the threshold probes that cannot succeed. This learns each
corpus's Spanish vocabulary both ways (tensorflow-text's
`bert_vocab_from_dataset` first, then kformer's, or the other way round on
alternate rounds), counts the probes each learned (calls of the learner's
`learn_with_thresh`), checks the two vocabularies are the same token for
token, and prints the median times. The corpora: samples of the shared
spa-eng corpus and, with --joined, the first pairs of a corpus made by
`bench/make_corpus.py` (what `kformer train` learns from a large file).

    python bench/wordpiece.py [--rounds 1] [--joined /tmp/corpora/pairs-1m.tsv]
"""

import argparse
import itertools
import statistics
import time
from pathlib import Path

import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

from kformer.data.pairs import PairFile, read_pairs
from kformer.data.text import RESERVED_TOKENS, build_vocabulary, normalize

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "spa-eng" / "spa-eng.zip"


def tensorflow_text(sentences, vocab_size):
    """What build_vocabulary did before: tensorflow-text's learner, as it comes."""
    dataset = tf.data.Dataset.from_tensor_slices(sentences).batch(1024).map(normalize)
    return bert_vocab_from_dataset.bert_vocab_from_dataset(
        dataset, vocab_size, RESERVED_TOKENS, bert_tokenizer_params=dict(lower_case=False), learn_params={}
    )


def counting_probes():
    """Wraps the learner's one-threshold function (in this script only) to count its calls."""
    learn_with_thresh, probes = learner.learn_with_thresh, [0]

    def counted(*args):
        probes[0] += 1
        return learn_with_thresh(*args)

    learner.learn_with_thresh = counted
    return probes


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--corpus", type=Path, default=SHARED)
    parser.add_argument("--joined", type=Path, help="a bench/make_corpus.py file: its first 200,000 pairs")
    parser.add_argument("--vocab-size", type=int, default=8000)
    args = parser.parse_args()
    cases = []
    if args.corpus.is_file():
        pairs = read_pairs(args.corpus)
        cases += [(f"spa-eng, first {n:,} pairs", [t for _, t in pairs[:n]]) for n in (10_000, 100_000)]
    if args.joined:
        joined = [t for _, t in itertools.islice(iter(PairFile(args.joined)), 200_000)]
        cases.append((f"{args.joined.name}, first 200,000 pairs", joined))
    probes = counting_probes()
    ways = {"tensorflow-text": tensorflow_text, "kformer": build_vocabulary}
    print(f"Spanish side, {args.vocab_size} tokens asked, {args.rounds} round(s), medians:")
    print("| sentences | tensorflow-text (s) | probes | kformer (s) | probes | ratio | the same vocabulary |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, sentences in cases:
        seconds, learned, probed = {w: [] for w in ways}, {}, {}
        for round_ in range(args.rounds):
            for way in list(ways)[:: 1 if round_ % 2 == 0 else -1]:
                probes[0], start = 0, time.perf_counter()
                learned[way] = ways[way](sentences, args.vocab_size)
                seconds[way].append(time.perf_counter() - start)
                probed[way] = probes[0]
        before, after = (statistics.median(seconds[w]) for w in ways)
        same = "yes" if learned["kformer"] == learned["tensorflow-text"] else "**no**"
        print(
            f"| {name} | {before:.1f} | {probed['tensorflow-text']} | {after:.1f} | {probed['kformer']} "
            f"| {after / before:.2f} | {same} ({len(learned['kformer']):,} tokens) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
