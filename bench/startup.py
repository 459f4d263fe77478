"""What `import kformer` and `kformer --help` cost, this checkout against another, side by side.

Each round runs every command once in a fresh process, checkouts alternating, so machine
noise hits both alike; the table gives the median wall time of each. Give the other
checkout with --other (for example `git worktree add /tmp/before HEAD~1`).

    python bench/startup.py --other /tmp/before [--rounds 5]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import checkouts  # bench/checkouts.py, beside this script

HERE = checkouts.THIS
COMMANDS = {
    "kformer --help": ["-m", "kformer", "--help"],
    "import kformer": ["-c", "import kformer"],
    "import kformer; load_model(layers.keras)": [
        "-c",
        f"import kformer, keras; keras.saving.load_model({str(HERE / 'tests/data/release-0.1.0/layers.keras')!r})",
    ],
}


def seconds(checkout, arguments):
    started = time.perf_counter()
    result = checkouts.run(checkout, arguments, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    return elapsed if result.returncode == 0 else float("nan")  # nan: that checkout cannot do it


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", type=Path, required=True, help="another kformer checkout to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    contenders = {"this": checkouts.THIS, "other": args.other.resolve()}
    times = {(who, name): [] for who in contenders for name in COMMANDS}
    for round_ in range(args.rounds):
        for name, arguments in COMMANDS.items():
            for who, checkout in contenders.items():
                times[who, name].append(seconds(checkout, arguments))
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"| command | this checkout (s) | {args.other} (s) |\n| --- | --- | --- |")
    for name in COMMANDS:
        this, other = (statistics.median(times[who, name]) for who in contenders)
        print(f"| `{name}` | {this:.2f} | {other:.2f} |")


if __name__ == "__main__":
    main()
