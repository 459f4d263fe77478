"""One training recipe on Tatoeba spa-eng, scored on the validation split (and, once, on test).

Each call trains one variation of `kformer train`'s recipe under a budget and
prints one JSON line: steps, seconds, greedy BLEU (lowercased; sacreBLEU's 13a
and intl tokenizers) and chrF on the validation split, where every choice is
made. `--test` also scores the test split: for the chosen recipe only, once.

    python bench/recipe.py --data ../shared/corpora/spa-eng/spa-eng.zip --minutes 5 \
        --name budget --set schedule=budget --log bench/recipe.jsonl
"""

import argparse
import json
import shutil
import time
from pathlib import Path

import sacrebleu

import kformer
from kformer.data.pairs import read_pairs, split_pairs
from kformer.training.config import TrainingConfig


def scores(translator, pairs, beam=False):
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    started = time.perf_counter()
    hypotheses = translator.translate(sources)
    return {
        "bleu": round(sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score, 2),
        "bleu_intl": round(sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True, tokenize="intl").score, 2),
        "chrf": round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2),
        "seconds": round(time.perf_counter() - started, 1),
    }


def value(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"none": None, "true": True, "false": False}.get(text.lower(), text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="spa-eng.zip (or a pair file)")
    parser.add_argument("--minutes", type=float, help="wall-clock budget")
    parser.add_argument("--name", required=True, help="what this variation is called in the log")
    parser.add_argument("--set", action="append", default=[], help="a TrainingConfig field, name=value")
    parser.add_argument("--pairs", type=int, help="train on the first N training pairs only")
    parser.add_argument("--half", choices=("first", "second"), help="train on one half of the training split")
    parser.add_argument("--beam", action="store_true", help="also score beam 4")
    parser.add_argument("--test", action="store_true", help="also score the test split (the chosen recipe, once)")
    parser.add_argument("--out", default="/tmp/kformer-bench-recipe", help="scratch directory")
    parser.add_argument("--keep", action="store_true", help="keep the model directory (for --set init_from=...)")
    parser.add_argument("--log", default="bench/recipe.jsonl", help="JSON lines to append to")
    args = parser.parse_args()
    splits = split_pairs(read_pairs(args.data))
    if args.half:
        middle = len(splits["train"]) // 2
        splits["train"] = splits["train"][:middle] if args.half == "first" else splits["train"][middle:]
    if args.pairs:
        splits["train"] = splits["train"][: args.pairs]
    settings = dict(d_model=256, num_heads=8, num_layers=2, d_ff=1024, patience=1000)
    settings.update({key: value(text) for key, text in (item.split("=", 1) for item in args.set)})
    config = TrainingConfig(minutes=args.minutes, **settings)
    out = Path(args.out) / args.name
    shutil.rmtree(out, ignore_errors=True)
    trained = kformer.train_translator(splits, out, config, verbose=2)
    result = {
        "name": args.name,
        "minutes": args.minutes,
        "train_pairs": len(splits["train"]),
        "settings": settings,
        "steps": trained.config["result"]["steps"],
        "train_seconds": trained.config["result"]["seconds"],
        # chrF of the keeper's validation sample: the weights kept, and the checkpoint average (--average)
        **{
            key: trained.config["result"][key]
            for key in ("val_chrf_kept", "val_chrf_average")
            if key in trained.config["result"]
        },
        "valid": scores(kformer.Translator(trained), splits["valid"]),
    }
    if args.beam:
        result["valid_beam4"] = scores(kformer.Translator(trained, beam_size=4), splits["valid"])
    if args.test:
        result["test"] = scores(kformer.Translator(trained), splits["test"])
        result["test_beam4"] = scores(kformer.Translator(trained, beam_size=4), splits["test"])
    print(json.dumps(result), flush=True)
    with open(args.log, "a") as log:
        log.write(json.dumps(result) + "\n")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
