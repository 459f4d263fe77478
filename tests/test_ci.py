"""CI (.ci/run): the README's test command as written, then the slow tests inside a deadline."""

import os
import re
import subprocess
import sys
import time

from conftest import REPO, SLOW_TESTS_UNTIL


def test_ci_runs_the_readmes_test_command_as_written_and_gives_the_slow_tests_a_deadline():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    quick_start = re.search(r"```bash\n(.*?)```", readme, re.DOTALL).group(1).strip().splitlines()
    assert len(quick_start) == 2, quick_start  # one command runs the demo, one the tests
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert quick_start[1] in ci
    deadline = next(i for i, line in enumerate(ci) if line.startswith(f"export {SLOW_TESTS_UNTIL}="))
    slow = next(i for i, line in enumerate(ci) if "-m slow" in line)
    assert deadline < slow


ORDERED = """
import os, time
import pytest

@pytest.mark.slow
def test_slow_before_the_deadline():
    pass

def test_the_deadline_passes():
    os.environ["KFORMER_SLOW_TESTS_UNTIL"] = str(time.time() - 1)

@pytest.mark.slow
def test_slow_after_the_deadline():
    raise AssertionError("ran past its deadline")

def test_default_after_the_deadline():
    pass
"""


def test_a_slow_test_not_started_by_cis_deadline_is_skipped_and_says_so_while_the_others_run(tmp_path):
    (tmp_path / "test_ordered.py").write_text(ORDERED)
    env = dict(os.environ, PYTHONPATH=str(REPO / "tests"), **{SLOW_TESTS_UNTIL: str(time.time() + 3600)})
    run = subprocess.run(  # this repository's conftest as a plugin, over a file of tests run in order
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-ra", "-v", "test_ordered.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    outcomes = dict(re.findall(r"test_ordered.py::(\w+) (PASSED|SKIPPED|FAILED)", run.stdout))
    assert outcomes == {
        "test_slow_before_the_deadline": "PASSED",
        "test_the_deadline_passes": "PASSED",
        "test_slow_after_the_deadline": "SKIPPED",
        "test_default_after_the_deadline": "PASSED",
    }, run.stdout[-3000:]
    reason = re.search(r"SKIPPED \[1\] \S+: (.*)", run.stdout).group(1)
    assert "past CI's time for the slow tests" in reason and "`pytest -m slow` runs it" in reason, reason
