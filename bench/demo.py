"""How the demo's settings are chosen: the demo's training run under variations, validation scores each.

Each variation trains for the same wall-clock budget on the built-in corpus (one after
the other, so noise can favour either) and is scored on the validation split, where
choices are made. `--test` scores the compositional test split too: for the chosen
settings, once.

    python bench/demo.py '{}' '{"dropout": 0.1}' '{"schedule": "noam"}'
"""

import json
import shutil
import sys
import tempfile
import time

from kformer.cli import DEMO_CONFIG
from kformer.data.corpus import builtin_splits
from kformer.training.config import TrainingConfig
from kformer.training.evaluation import evaluate
from kformer.training.jobs import train_translator


def main():
    splits = builtin_splits()
    test = "--test" in sys.argv
    print(f"demo settings: {DEMO_CONFIG}")
    for variation in [a for a in sys.argv[1:] if a != "--test"] or ["{}"]:
        overrides = json.loads(variation)
        settings = {**DEMO_CONFIG, "minutes": 2.0, **overrides}
        out = tempfile.mkdtemp()
        started = time.perf_counter()
        trained = train_translator(splits, out, TrainingConfig(**settings), verbose=0)
        seconds = time.perf_counter() - started
        for name in ("valid", "test") if test else ("valid",):
            result = evaluate(trained, splits[name])
            print(
                f"{json.dumps(overrides):<40} steps {trained.config['result']['steps']:>5}  {seconds:>4.0f} s  "
                f"{name} exact match {result['exact_match']:.1f}%  BLEU {result['bleu']:.2f}  "
                f"chrF {result['chrf']:.2f}",
                flush=True,
            )
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
