"""Chapter 4's eight stages on several seeds, and stage 7's three changes one at a time.

The chapter trains each stage once (seed 0) to stay inside its 3 minutes; this trains every
stage, stage 0 (a GRU encoder-decoder of stage 7's size, the RNN attention replaced), and
stage 6 plus each of stage 7's parts alone (residual, norm, feed-forward), residual with
feed-forward, and all three, with the chapter's recipe (`kformer.teaching.mvp.train_stage`)
on `--seeds` seeds, scores each with `mvp.stage_scores` on the chapter's role-swap twins,
test sentences and subject-verb agreement sentences, and writes the table that chapter 4's
error bars read. Seed 0 is the chapter's own run. About 18 minutes for 3 seeds on 2 cores.

    python bench/stages.py [--seeds 3] [--out notebooks/data/stage_seeds.json]
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
OUT = Path(__file__).resolve().parents[1] / "notebooks" / "data" / "stage_seeds.json"


def models_to_train():
    """(label, stage, parts): stage 0 (the GRU), the eight stages, then stage 6 plus each part of stage 7."""
    stages = [(str(stage), stage, None) for stage in (0, *mvp.STAGES)]
    return stages + [("6 + " + " + ".join(parts), 7, parts) for parts in PARTS]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    splits = builtin_splits()
    source_tokenizer = Tokenizer(build_vocabulary([s for s, _ in splits["train"]], 1000))
    target_tokenizer = Tokenizer(build_vocabulary([t for _, t in splits["train"]], 1000))
    train_english = [english for english, _ in splits["train"]]
    twins = role_swap_pairs(200, exclude=train_english)
    test_pairs = splits["test"][:300]
    agreement = agreement_pairs(200, exclude=train_english)
    rows, started = [], time.perf_counter()
    todo = [(seed, *model) for seed in range(args.seeds) for model in models_to_train()]
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".partial")
    partial.write_text(
        json.dumps(
            {"command": f"python bench/stages.py --seeds {args.seeds}", "seeds": args.seeds, "rows": rows}, indent=1
        )
    )
    partial.replace(args.out)
    print(f"wrote {args.out} ({len(rows)} rows, {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
