"""This checkout against another: how every before-and-after benchmark runs a kformer checkout.

A checkout is a folder holding a `kformer/` package (`git worktree add /tmp/before HEAD~1`, or
a `git archive` of a commit unpacked). `run` and `start` run `python ARGUMENTS` in a fresh
process whose `import kformer` is that checkout's: the process starts in the checkout, with
the checkout first on PYTHONPATH (ahead of an editable install of this one, whose finder
Python asks last), and TensorFlow's start-up notes silenced. A script that runs itself as the
worker (`python bench/X.py --worker ...`) stays this checkout's script; only kformer changes.

    from checkouts import THIS, run
    run(other, ["-c", "import kformer; print(kformer.__file__)"], capture_output=True, text=True)

The scripts that use it: compare_checkouts.py, speed_checkouts.py, startup.py, stream.py.
`wordpiece()` gives them, and export.py, this checkout's export/wordpiece.py (the plain-Python
clients' tokenizer and output limit) without putting export/ on sys.path.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

THIS = Path(__file__).resolve().parent.parent  # this checkout


def _environment(checkout):
    return dict(os.environ, PYTHONPATH=str(checkout), TF_CPP_MIN_LOG_LEVEL="3")


def run(checkout, arguments, **options):
    """`subprocess.run` of `python arguments` with `checkout`'s kformer; `options` go to it (check=True...)."""
    checkout = Path(checkout).resolve()
    return subprocess.run([sys.executable, *arguments], cwd=checkout, env=_environment(checkout), **options)


def start(checkout, arguments, **options):
    """`subprocess.Popen` of `python arguments` with `checkout`'s kformer (a worker that answers on its pipes)."""
    checkout = Path(checkout).resolve()
    return subprocess.Popen([sys.executable, *arguments], cwd=checkout, env=_environment(checkout), **options)


def wordpiece():
    """This checkout's export/wordpiece.py as a module (export/ holds scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("wordpiece", THIS / "export" / "wordpiece.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
