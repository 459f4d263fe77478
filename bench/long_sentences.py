"""Sentences longer than the model's length limit (issue 52): a longer buffer, pieces, or the cut.

Consecutive held-out pairs of a corpus whose source and target both end in "." are
joined, 4 to 9 at a time, into one sentence: each but the last loses its full stop and
the next follows after ", " (sources and references alike), so the sentence splitter
leaves it whole. Those longer than the model's `max_length` in source tokens are
translated, greedy, four ways:

- cut: the source cut to `max_length` tokens and the output limited to it (the
  translator before this issue);
- longer buffer: the whole source, the output limited to 2 x source tokens + 10;
- pieces at commas: the clauses packed, in order, into pieces of at most `max_length`
  tokens, each translated alone, joined by ", ";
- pieces of words: the words in the fewest pieces of at most `max_length` tokens, of
  about equal length, joined by " ".

Each is scored with kformer's sacreBLEU settings against the joined references; length
is characters over the references'. Run it on the validation split (the choice) and
once on the test split (the report).

    python bench/long_sentences.py --model /tmp/spa12 --data ../shared/corpora/spa-eng/spa-eng.zip --split valid
"""

import argparse
import json
import math
import random

import tensorflow as tf

import kformer
from kformer.data.stream import corpus_splits
from kformer.inference.decoding import decode
from kformer.training.evaluation import score


def joined(pairs, seed=0):
    """Consecutive statements joined into one sentence each: [(source, reference)]."""
    statements = [(s, t) for s, t in pairs if s.endswith(".") and t.endswith(".")]
    rng, out, start = random.Random(seed), [], 0
    while start < len(statements):
        size = rng.randint(4, 9)
        chunk = statements[start : start + size]
        out.append(tuple(", ".join(text[:-1] for text in texts) + "." for texts in zip(*chunk, strict=True)))
        start += size
    return out


def greedy(model, tokenizer, sources, limit, cut=None):
    """Each source translated alone in batches of 32; limit(width) the output limit of a batch;
    `cut`: read only a source's first `cut` tokens."""

    @tf.function(reduce_retracing=True)
    def run(tokens, max_length):
        return decode(model, tokens, max_length)

    out = []
    for start in range(0, len(sources), 32):
        tokens = tokenizer[0].tokenize(tf.constant(sources[start : start + 32])).to_tensor()[:, :cut]
        ids = run(tokens, tf.constant(limit(tokens.shape[1]), tf.int32))
        out += [t.decode() for t in tokenizer[1].detokenize(ids).numpy()]
    return out


def packed(parts, lengths, most):
    """Consecutive parts packed into the fewest pieces of at most `most` tokens (a longer part alone)."""
    pieces, piece, size = [], [], 0
    for part, length in zip(parts, lengths, strict=True):
        if piece and size + length > most:
            pieces.append(piece)
            piece, size = [], 0
        piece.append(part)
        size += length
    return pieces + [piece]


def in_pieces(model, tokenizers, sources, most, by_commas):
    """Each source split into pieces, every piece translated (one batch), rejoined."""
    pieces_of = []
    for source in sources:
        if by_commas:
            parts = source.split(", ")
            lengths = [len(x) for x in tokenizers[0].tokenize(tf.constant(parts)).to_list()]
            pieces_of.append([", ".join(piece) for piece in packed(parts, lengths, most)])
        else:
            words = source.split(" ")
            lengths = [len(x) for x in tokenizers[0].tokenize(tf.constant(words)).to_list()]
            count = math.ceil(sum(lengths) / most)
            pieces = packed(words, lengths, math.ceil(sum(lengths) / count))
            pieces_of.append([" ".join(piece) for piece in pieces])
    flat = greedy(model, tokenizers, [p for pieces in pieces_of for p in pieces], lambda w: 2 * w + 10)
    it, sep = iter(flat), ", " if by_commas else " "
    return [sep.join(next(it).rstrip(".") if i < len(pieces) - 1 else next(it) for i in range(len(pieces)))
            for pieces in pieces_of]  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--split", choices=["valid", "test"], default="valid")
    args = parser.parse_args()
    trained = kformer.load(args.model)
    tokenizers = (trained.source_tokenizer, trained.target_tokenizer)
    most = trained.max_length
    pairs = joined(corpus_splits(args.data, 0, verbose=0)[args.split])
    counts = [len(x) for x in tokenizers[0].tokenize(tf.constant([s for s, _ in pairs])).to_list()]
    long = [pair for pair, count in zip(pairs, counts, strict=True) if count > most]
    sources, references = [s for s, _ in long], [t for _, t in long]
    lengths = sorted(c for c in counts if c > most)
    print(f"{len(long)} joined sentences over {most} source tokens (median {lengths[len(lengths) // 2]}, "
          f"longest {lengths[-1]}), {args.split} split.", flush=True)  # fmt: skip

    results = {}
    for name, run in [
        ("cut", lambda: greedy(trained.model, tokenizers, sources, lambda w: most, cut=most)),
        ("longer buffer", lambda: greedy(trained.model, tokenizers, sources, lambda w: 2 * w + 10)),
        ("pieces at commas", lambda: in_pieces(trained.model, tokenizers, sources, most, True)),
        ("pieces of words", lambda: in_pieces(trained.model, tokenizers, sources, most, False)),
    ]:
        outputs = run()
        scores = score(outputs, references)
        length = round(sum(map(len, outputs)) / sum(map(len, references)), 3)
        results[name] = {**scores, "length": length}
        print(f"  {name:18s} BLEU {scores['bleu']:5.1f}  chrF {scores['chrf']:5.1f}  length {length:.3f}", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
