"""Chapter 4's eight stages on several seeds, and stage 7's three changes one at a time.

Chapter 4 trains each stage once (seed 0) to stay inside its 3 minutes; this trains every stage,
stage 0 (a GRU encoder-decoder of stage 7's size, the RNN attention replaced), the same GRUs
with attention ("0 + attention", also stage 7's size), and stage 6 plus each of stage 7's parts
alone (residual, norm, feed-forward), residual with feed-forward, and all three, with the
chapter's recipe (`kformer.teaching.mvp.train_stage`) on `--seeds` seeds, scores each with
`mvp.stage_scores` on the chapter's role-swap twins, test sentences and subject-verb agreement
sentences, and writes the table that chapter 4b's error bars read. Seed 0 is chapter 4's own
run. About 20 minutes for 3 seeds on 2 cores.

`--corpus harder` trains only stage 0 (the GRUs, with and without attention) and stage 7 on the
harder corpus, whose past tense hides the verb's number in English, and scores the verbs on
past-tense agreement sentences ("the cats that the girl saw slept" -> "durmieron"): seed 000's
memory across a clause, which the default corpus's present tense cannot test. About 5 minutes
for 3 seeds.

`--only LABEL ...` trains those models alone and replaces their rows in the file, keeping the rest.

    python bench/stages.py [--seeds 3] [--corpus default|harder] [--only "0 + attention"] [--out FILE]
"""

import argparse
import json
import math
import time
from pathlib import Path

from kformer.data.corpus import agreement_pairs, builtin_splits, role_swap_pairs
from kformer.data.text import Tokenizer, build_vocabulary
from kformer.teaching import mvp

PARTS = [("residual",), ("norm",), ("feed_forward",), ("residual", "feed_forward"), mvp.STAGE_7_PARTS]
GRU_UNITS = 104  # stage 0 at stage 7's size: 155,305 parameters against 156,961 on the built-in vocabularies
ATTENTION_UNITS = 82  # with attention, 157,517 parameters
DATA = Path(__file__).resolve().parents[1] / "notebooks" / "data"
OUT = {"default": DATA / "stage_seeds.json", "harder": DATA / "stage_seeds_harder.json"}


def models_to_train(corpus):
    """(label, stage, parts, sizes): stage 0 (the GRU) without and with attention, both at stage 7's size, the
    eight stages, then stage 6 plus each part of stage 7; on the harder corpus the two GRUs and stage 7 only."""
    gru = ("0", 0, None, {"units": GRU_UNITS})
    gru_attention = ("0 + attention", 0, None, {"units": ATTENTION_UNITS, "attention": True})
    if corpus == "harder":
        return [gru, gru_attention, ("7", 7, None, {})]
    stages = [(str(stage), stage, None, {}) for stage in mvp.STAGES]
    return [gru, gru_attention, *stages] + [("6 + " + " + ".join(p), 7, p, {}) for p in PARTS]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--corpus", choices=sorted(OUT), default="default")
    parser.add_argument("--out", type=Path, help="default: notebooks/data/stage_seeds[_harder].json")
    parser.add_argument("--only", nargs="+", metavar="LABEL", help="train these models; keep the file's other rows")
    args = parser.parse_args()
    out = args.out or OUT[args.corpus]
    labels = [label for label, *_ in models_to_train(args.corpus)]
    if args.only and not set(args.only) <= set(labels):
        parser.error(f"--only takes model labels of the {args.corpus} corpus: {', '.join(map(repr, labels))}.")
    if args.only and not out.is_file():
        parser.error(f"--only keeps the other rows of {out}, which does not exist: run without --only first.")
    harder = args.corpus == "harder"
    splits = builtin_splits(harder=harder)
    source_tokenizer = Tokenizer(build_vocabulary([s for s, _ in splits["train"]], 1000))
    target_tokenizer = Tokenizer(build_vocabulary([t for _, t in splits["train"]], 1000))
    train_english = [english for english, _ in splits["train"]]
    twins = role_swap_pairs(200, exclude=train_english)
    test_pairs = splits["test"][:300]
    agreement = agreement_pairs(200, exclude=train_english, past=harder)
    rows, started = [], time.perf_counter()
    models = [model for model in models_to_train(args.corpus) if not args.only or model[0] in args.only]
    todo = [(seed, *model) for seed in range(args.seeds) for model in models]
    for done, (seed, label, stage, parts, sizes) in enumerate(todo, 1):
        began = time.perf_counter()
        model, history = mvp.train_stage(
            stage, splits["train"], source_tokenizer, target_tokenizer, seed, parts, **sizes
        )
        trained = time.perf_counter() - began
        scores, _ = mvp.stage_scores(model, twins, test_pairs, source_tokenizer, target_tokenizer, agreement)
        row = {"model": label, "seed": seed, "parameters": model.count_params(), "train seconds": round(trained, 1)}
        row["loss"] = history["loss"][-1]
        rows.append(row | {name: None if math.isnan(value) else value for name, value in scores.items()})
        print(
            f"[{done}/{len(todo)}, {time.perf_counter() - started:.0f} s] seed {seed}, {label}: "
            + ", ".join(f"{name} {value:.3f}" for name, value in scores.items()),
            flush=True,
        )
    command = f"python bench/stages.py --seeds {args.seeds} --corpus {args.corpus}"
    if args.only:  # the file's other rows, in the order models_to_train gives
        before = json.loads(out.read_text())
        kept = [row for row in before["rows"] if row["model"] not in args.only]
        rows = sorted(kept + rows, key=lambda row: (row["seed"], labels.index(row["model"])))
        command = before["command"] + "; then " + command + " --only " + " ".join(map(repr, args.only))
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    partial.write_text(
        json.dumps(
            {
                "command": command,
                "seeds": args.seeds,
                "rows": rows,
            },
            indent=1,
        )
    )
    partial.replace(out)
    print(f"wrote {out} ({len(rows)} rows, {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
