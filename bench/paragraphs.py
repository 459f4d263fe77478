"""Lines of several sentences (issue 52): translated at once, against each sentence alone and joined.

The held-out test pairs of a corpus (the split `kformer train` held out) are grouped, in
order, into lines of 2 to 6 sentences (sizes drawn from a seeded generator), sources
joined by a space, references too. Each line is translated three ways with one model,
greedy: each sentence alone and the translations joined (the reference way), the whole
line with the sentence splitter (`Translator.translate`, what every runtime now does),
and the whole line read as one sentence (what the translator did before the splitter:
`translate_ids` on the line's tokens, cut to the model's max_length). Each is scored
with kformer's sacreBLEU settings, and its length is its characters over the reference
way's. Then the splitter alone is timed on 10,000 of these lines, against tokenizing them.

    python bench/paragraphs.py --model /tmp/spa12 --data ../shared/corpora/spa-eng/spa-eng.zip
"""

import argparse
import json
import random
import time

import tensorflow as tf

import kformer
from kformer.data.sentences import split_sentences
from kformer.data.stream import corpus_splits
from kformer.data.text import utf8_batch
from kformer.training.evaluation import score


def grouped(pairs, seed=0):
    """Consecutive pairs joined into lines of 2 to 6: [(sources, references)] as lists of sentences."""
    rng, groups, start = random.Random(seed), [], 0
    while start < len(pairs):
        size = rng.randint(2, 6)
        chunk = pairs[start : start + size]
        groups.append(([s for s, _ in chunk], [t for _, t in chunk]))
        start += size
    return groups


def read_whole(translator, lines, batch_size=64):
    """Each line as one sentence: tokens cut to the model's max_length, as the translator read lines before."""
    out = []
    for start in range(0, len(lines), batch_size):
        tokens = translator.source_tokenizer.tokenize(tf.constant(lines[start : start + batch_size])).to_tensor()
        ids = translator.translate_ids(tokens)
        out += [t.decode() for t in translator.target_tokenizer.detokenize(ids).numpy()]
    return out


def timed(function, *args):
    started = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    translator = kformer.Translator(args.model)
    test = corpus_splits(args.data, 0, verbose=0)["test"]
    groups = grouped(test, args.seed)
    lines = [" ".join(sources) for sources, _ in groups]
    references = [" ".join(targets) for _, targets in groups]
    print(f"{len(test):,} test pairs in {len(lines):,} lines of 2-6 sentences.", flush=True)

    alone, alone_s = timed(translator.translate, [s for sources, _ in groups for s in sources])
    it = iter(alone)
    one_by_one = [" ".join(next(it) for _ in sources) for sources, _ in groups]
    split, split_s = timed(translator.translate, lines)
    whole, whole_s = timed(read_whole, translator, lines)
    base = sum(map(len, one_by_one))
    results = {}
    for name, outputs, seconds in [
        ("each sentence alone, joined", one_by_one, alone_s),
        ("whole line, split (now)", split, split_s),
        ("whole line, read as one sentence (before)", whole, whole_s),
    ]:
        scores = score(outputs, references)
        results[name] = {**scores, "length": round(sum(map(len, outputs)) / base, 3), "seconds": round(seconds, 1)}
        print(f"  {name:44s} BLEU {scores['bleu']:5.1f}  chrF {scores['chrf']:5.1f}  length "
              f"{results[name]['length']:.3f}  {seconds:6.1f} s", flush=True)  # fmt: skip

    found = split_sentences(tf.constant(lines)).row_lengths().numpy()
    right = sum(int(n) == len(sources) for n, (sources, _) in zip(found, groups, strict=True))
    print(f"  the splitter found each line's own sentence count in {right:,} of {len(lines):,} lines")
    many = tf.constant(utf8_batch((lines * (10_000 // len(lines) + 1))[:10_000]))
    split_sentences(many[:10])  # first call outside the timing
    _, splitting = timed(split_sentences, many)
    _, tokenizing = timed(translator.source_tokenizer.tokenize, many)
    print(f"  splitting 10,000 lines: {splitting:.3f} s; tokenizing them: {tokenizing:.3f} s")
    results["splitter"] = {"lines_right": right, "lines": len(lines), "seconds_10k": round(splitting, 3),
                           "tokenize_seconds_10k": round(tokenizing, 3)}  # fmt: skip
    print(json.dumps(results))


if __name__ == "__main__":
    main()
