"""Chapter 4's eight stages on several seeds, and stage 7's three changes one at a time.

The chapter trains each stage once (seed 0) to stay inside its 3 minutes; this trains every
stage, stage 0 (a GRU encoder-decoder of stage 7's size, the RNN attention replaced), and
stage 6 plus each of stage 7's parts alone (residual, norm, feed-forward), residual with
feed-forward, and all three, with the chapter's recipe (`kformer.teaching.mvp.train_stage`)
on `--seeds` seeds, scores each with `mvp.stage_scores` on the chapter's role-swap twins,
test sentences and subject-verb agreement sentences, and writes the table that chapter 4's
error bars read. Seed 0 is the chapter's own run. About 18 minutes for 3 seeds on 2 cores.

`--corpus harder` trains only stage 0 (the GRU) and stage 7 on the harder corpus, whose past
tense hides the verb's number in English, and scores the verbs on past-tense agreement
sentences ("the cats that the girl saw slept" -> "durmieron"): seed 000's memory across a
clause, which the default corpus's present tense cannot test. About 3 minutes for 3 seeds.

    python bench/stages.py [--seeds 3] [--corpus default|harder] [--out FILE]
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
DATA = Path(__file__).resolve().parents[1] / "notebooks" / "data"
OUT = {"default": DATA / "stage_seeds.json", "harder": DATA / "stage_seeds_harder.json"}


def models_to_train(corpus):
    """(label, stage, parts): stage 0 (the GRU), the eight stages, then stage 6 plus each part of stage 7; on the
    harder corpus stages 0 and 7 only."""
    if corpus == "harder":
        return [("0", 0, None), ("7", 7, None)]
    stages = [(str(stage), stage, None) for stage in (0, *mvp.STAGES)]
    return stages + [("6 + " + " + ".join(parts), 7, parts) for parts in PARTS]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--corpus", choices=sorted(OUT), default="default")
    parser.add_argument("--out", type=Path, help="default: notebooks/data/stage_seeds[_harder].json")
    args = parser.parse_args()
    out = args.out or OUT[args.corpus]
    harder = args.corpus == "harder"
    splits = builtin_splits(harder=harder)
    source_tokenizer = Tokenizer(build_vocabulary([s for s, _ in splits["train"]], 1000))
    target_tokenizer = Tokenizer(build_vocabulary([t for _, t in splits["train"]], 1000))
    train_english = [english for english, _ in splits["train"]]
    twins = role_swap_pairs(200, exclude=train_english)
    test_pairs = splits["test"][:300]
    agreement = agreement_pairs(200, exclude=train_english, past=harder)
    rows, started = [], time.perf_counter()
    todo = [(seed, *model) for seed in range(args.seeds) for model in models_to_train(args.corpus)]
    for done, (seed, label, stage, parts) in enumerate(todo, 1):
        began = time.perf_counter()
        sizes = {"units": GRU_UNITS} if stage == 0 else {}
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
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    partial.write_text(
        json.dumps(
            {
                "command": f"python bench/stages.py --seeds {args.seeds} --corpus {args.corpus}",
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
