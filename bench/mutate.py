"""Mutation testing of one module against the tests written for it: `mutmut run`, scored.

    python bench/mutate.py kformer/data/text.py tests/test_text.py [more test files or ids] [--max-children 2]

mutmut (setup.cfg [mutmut]) runs each mutant against the tests of the whole selection that
reach the mutated function. Outside the layers, everything reaches the data pipeline and
the training job, so one mutant of a tokenizer would wait on every training test: hours a
module on 2 cores. This runs mutmut in a copy of the committed tree (`git archive HEAD`,
your work tree untouched) whose setup.cfg mutates only MODULE against only the TESTS named,
then prints the module's counts as a bench/RESULTS.md row and each survivor's diff. The
score is a floor: the rest of the suite can only kill more.
"""

import argparse
import configparser
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def scratch_copy(module, tests, folder, slow=False):
    """The committed tree in `folder`, its [mutmut] section narrowed to `module` and `tests`; with `slow`, its
    pytest `addopts` no longer leave out the tests marked slow (a mutant only a slow test reaches)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    config = configparser.ConfigParser(interpolation=None)
    config.read(folder / "setup.cfg")
    section = config["mutmut"]
    # The fresh-process deselections still apply: those tests cannot run mutmut's trampolines.
    deselected = [line for line in section["pytest_add_cli_args_test_selection"].split() if line.startswith("--")]
    section["only_mutate"] = "\n" + module
    section["pytest_add_cli_args_test_selection"] = "\n" + "\n".join([*tests, *deselected])
    if slow:
        config["tool:pytest"]["addopts"] = config["tool:pytest"]["addopts"].replace('-m "not slow"', "").strip()
    with open(folder / "setup.cfg", "w") as file:
        config.write(file)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", help="the file to mutate, as setup.cfg's only_mutate names it: kformer/data/text.py")
    parser.add_argument("tests", nargs="+", help="the test files or test ids to kill its mutants with")
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument("--slow", action="store_true", help="run the tests marked slow too, when named in TESTS")
    parser.add_argument("--keep", action="store_true", help="leave the scratch copy (its mutants/ for `mutmut show`)")
    args = parser.parse_args(argv)
    if not (REPO / args.module).is_file():
        parser.error(f"no module {args.module} in {REPO}; name it from the repository root, as kformer/data/text.py.")
    if shutil.which("mutmut") is None:
        parser.error("mutmut is not installed: pip install mutmut==3.8.1 (the version tox -e mutation pins).")
    folder = Path(tempfile.mkdtemp(prefix="kformer-mutate-"))
    scratch_copy(args.module, args.tests, folder, args.slow)
    print(f"mutating {args.module} against {' '.join(args.tests)} in {folder}", flush=True)
    run = subprocess.run(["mutmut", "run", "--max-children", str(args.max_children)], cwd=folder)
    subprocess.run(["mutmut", "export-cicd-stats"], cwd=folder, check=True, capture_output=True)
    stats = json.loads((folder / "mutants" / "mutmut-cicd-stats.json").read_text())
    results = subprocess.run(["mutmut", "results"], cwd=folder, capture_output=True, text=True).stdout
    survivors = [line.split(":")[0].strip() for line in results.splitlines() if line.strip().endswith("survived")]
    for name in survivors:
        shown = subprocess.run(["mutmut", "show", name], cwd=folder, capture_output=True, text=True).stdout
        print(f"\n# survived: {name}\n{shown}")
    total = stats["total"]
    score = 100 * stats["killed"] / total if total else 0.0
    print("\n| module | mutants | killed | timed out | survived | no tests | score (killed / all) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    row = [args.module, total, stats["killed"], stats["timeout"], stats["survived"], stats["no_tests"], f"{score:.1f}%"]
    print("| " + " | ".join(str(cell) for cell in row) + " |")
    if not args.keep:
        shutil.rmtree(folder)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
