"""Long training pairs (issue 52): models trained under each rule, scored by one translator.

Models trained on a corpus of long pairs (`bench/make_corpus.py --join 3`: three spa-eng pairs
a line) for the same steps, one with the old rule (a pair over the limit cut, [END] after
the cut) and one or more with the new (left out), are scored on the corpus's validation
split with this checkout's translator, so only the training rule differs, two ways:

- as kformer translates (each line split into its sentences);
- each line read whole (no split; a line over the model's limit in pieces): where a model
  taught to stop at the cut would stop early.

BLEU and chrF are kformer's sacreBLEU settings; length is output words over reference words.

    python bench/long_pairs.py --data /tmp/long-120k.tsv /tmp/long-cut40 /tmp/long-out40 /tmp/long-default
"""

import argparse
import json

import tensorflow as tf

import kformer
from kformer.data.stream import corpus_splits
from kformer.training.evaluation import score


def read_whole(translator, lines, batch_size=64):
    """Each line as one sentence: no sentence split (pieces only over the model's limit)."""
    out = []
    for start in range(0, len(lines), batch_size):
        tokens = translator.source_tokenizer.tokenize(tf.constant(lines[start : start + batch_size]))
        ids, _ = translator.translate_tokens(tokens)
        out += [text.decode() for text in translator.target_tokenizer.detokenize(ids).numpy()]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--lines", type=int, default=1000, help="validation lines scored (default: %(default)s)")
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    valid = corpus_splits(args.data, 0, verbose=0)["valid"][: args.lines]
    sources, references = [s for s, _ in valid], [t for _, t in valid]
    words = sum(len(r.split()) for r in references)
    results = {}
    for model in args.models:
        translator = kformer.Translator(model)
        for way, outputs in (("split", translator.translate(sources)), ("whole", read_whole(translator, sources))):
            scores = score(outputs, references)
            length = round(sum(len(o.split()) for o in outputs) / words, 3)
            results[f"{model}, {way}"] = {"bleu": scores["bleu"], "chrf": scores["chrf"], "length": length}
            print(f"{model:28s} {way:6s} BLEU {scores['bleu']:5.1f}  chrF {scores['chrf']:5.1f}  length {length:.3f}",
                  flush=True)  # fmt: skip
    print(json.dumps(results))


if __name__ == "__main__":
    main()
