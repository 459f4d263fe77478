"""How the demo's settings were chosen: the demo's training run under variations, test exact match each.

Each variation trains for the same wall-clock budget on the built-in corpus (one after
the other, so noise can favour either) and is scored on the compositional test split.

    python bench/demo.py '{}' '{"dropout": 0.1}' '{"batch_size": 128}'
"""

import json
import shutil
import sys
import tempfile
import time

from kformer.cli import DEMO_CONFIG
from kformer.corpus import builtin_splits
from kformer.evaluation import evaluate
from kformer.recipes import TrainingConfig, train_translator


def main():
    splits = builtin_splits()
    print(f"demo settings: {DEMO_CONFIG}")
    for variation in sys.argv[1:] or ["{}"]:
        overrides = json.loads(variation)
        settings = {**DEMO_CONFIG, "minutes": 2.0, **overrides}
        out = tempfile.mkdtemp()
        started = time.perf_counter()
        trained = train_translator(splits, out, TrainingConfig(**settings), verbose=0)
        result = evaluate(trained, splits["test"])
        print(
            f"{json.dumps(overrides):<40} steps {trained.config['result']['steps']:>5}  "
            f"{time.perf_counter() - started:>4.0f} s  test exact match {result['exact_match']:.1f}%  "
            f"BLEU {result['bleu']:.2f}",
            flush=True,
        )
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
