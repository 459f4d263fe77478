"""CI (.ci/run): the README's test command as written, then the slow tests inside a deadline."""

import os
import re
import subprocess
import sys
import time

from conftest import REPO, SLOW_TESTS_UNTIL


def test_ci_runs_the_readmes_test_command_as_written_and_gives_the_slow_tests_45_minutes():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    quick_start = re.search(r"```bash\n(.*?)```", readme, re.DOTALL).group(1).strip().splitlines()
    assert len(quick_start) == 2, quick_start  # one command runs the demo, one the tests
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert quick_start[1] in ci
    deadline = ci.index(f"export {SLOW_TESTS_UNTIL}=$(($(date +%s) + 45 * 60))")
    assert deadline < min(i for i, line in enumerate(ci) if "pytest" in line and not line.startswith("#"))


ORDERED = """
import os, time
import pytest

@pytest.fixture
def costly():
    raise AssertionError("a skipped test set up its fixtures")

@pytest.mark.slow
def test_slow_before_the_deadline():
    pass

def test_the_deadline_passes():
    os.environ["KFORMER_SLOW_TESTS_UNTIL"] = str(int(time.time()) - 1)

@pytest.mark.slow
def test_slow_after_the_deadline(costly):
    raise AssertionError("ran past its deadline")

def test_default_after_the_deadline():
    pass

@pytest.mark.slow
def test_another_slow_after_the_deadline():
    raise AssertionError("ran past its deadline")
"""


def run_pytest(folder, deadline):
    """This repository's conftest as a plugin, over `folder`'s tests in file order, none of setup.cfg's options."""
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    env.update(PYTHONPATH=str(REPO / "tests"), **{SLOW_TESTS_UNTIL: deadline})
    command = [sys.executable, *"-m pytest -p conftest -p no:cacheprovider -o addopts= -ra -v".split()]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def test_slow_tests_not_started_by_cis_deadline_are_skipped_and_named_while_the_others_run(tmp_path):
    (tmp_path / "test_ordered.py").write_text(ORDERED)
    run = run_pytest(tmp_path, str(int(time.time()) + 3600))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    outcomes = dict(re.findall(r"test_ordered.py::(\w+) (PASSED|SKIPPED|FAILED|ERROR)", run.stdout))
    assert outcomes == {
        "test_slow_before_the_deadline": "PASSED",
        "test_the_deadline_passes": "PASSED",
        "test_slow_after_the_deadline": "SKIPPED",
        "test_default_after_the_deadline": "PASSED",
        "test_another_slow_after_the_deadline": "SKIPPED",
    }, run.stdout[-3000:]
    reasons = re.findall(r"SKIPPED \[1\] .*?: (test_ordered.py::\w+): (.*)", run.stdout)
    assert [name for name, _ in reasons] == [
        "test_ordered.py::test_slow_after_the_deadline",
        "test_ordered.py::test_another_slow_after_the_deadline",
    ], run.stdout[-3000:]
    assert all("not started, past CI's time for the slow tests" in reason for _, reason in reasons), reasons

    bad = run_pytest(tmp_path, "45m")
    assert bad.returncode == 4, bad.stdout[-3000:] + bad.stderr[-3000:]
    assert "KFORMER_SLOW_TESTS_UNTIL='45m': give whole seconds" in bad.stderr, bad.stderr[-3000:]
    assert "Traceback" not in bad.stderr
