"""The file helpers every run and export writes through (kformer/files.py): where a write's temporary file lives,
what a failed write leaves and says, the JSON a run records, the directory and disk checks, and how a lock's
holder is read and judged alive."""

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kformer.files import (
    ModelDirectoryError,
    _gone,
    _lock_holder,
    require_space,
    writable_directory,
    write_atomically,
    write_json,
)


def test_a_write_goes_through_a_hidden_temporary_beside_its_file_in_folders_made_for_it(tmp_path):
    path = tmp_path / "run" / "training" / "best.weights.h5"  # two folders that do not exist yet
    seen = []

    def write(temporary):
        seen.append(Path(temporary))
        Path(temporary).write_text("weights")

    write_atomically(path, write)
    (temporary,) = seen
    assert temporary.parent == path.parent and temporary.name.startswith(".best.weights.h5.")
    assert temporary.name.endswith(".weights.h5")  # Keras reads the kind of file from its name
    assert path.read_text() == "weights" and sorted(p.name for p in path.parent.iterdir()) == ["best.weights.h5"]


@pytest.mark.parametrize("remove_first", [False, True])
def test_a_failed_write_names_the_users_file_and_leaves_no_temporary(tmp_path, remove_first):
    """The disk fills (or the writer raises anything else): the error names `path`, with the system's number and
    words; the temporary is gone, even when the writer removed it itself before failing."""
    path = tmp_path / "model.keras"

    def full_disk(temporary):
        if remove_first:
            Path(temporary).unlink()
        raise OSError(errno.ENOSPC, "No space left on device", temporary)

    with pytest.raises(OSError) as error:
        write_atomically(path, full_disk)
    assert (error.value.errno, error.value.strerror, error.value.filename) == (
        errno.ENOSPC,
        "No space left on device",
        str(path),
    )
    assert list(tmp_path.iterdir()) == []

    def interrupted(temporary):
        if remove_first:
            Path(temporary).unlink()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, interrupted)
    assert list(tmp_path.iterdir()) == []

    unnumbered = OSError("a writer's own error, without an errno")

    def odd(temporary):
        raise unnumbered

    with pytest.raises(OSError) as error:
        write_atomically(path, odd)
    assert error.value is unnumbered and list(tmp_path.iterdir()) == []


def test_a_runs_json_is_indented_sorted_and_ends_with_a_newline(tmp_path):
    write_json(tmp_path / "config.json", {"kind": "translator", "result": {"steps": 3, "bleu": 1.5}, "a": "niño"})
    assert (tmp_path / "config.json").read_bytes() == (
        b'{\n  "a": "ni\\u00f1o",\n  "kind": "translator",\n  "result": {\n    "bleu": 1.5,\n    "steps": 3\n  }\n}\n'
    )


def test_an_out_is_made_with_its_parents_and_refused_when_it_is_a_file_or_cannot_be_written(tmp_path, monkeypatch):
    assert writable_directory(tmp_path / "a" / "b") == tmp_path / "a" / "b" and (tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelDirectoryError) as error:
        writable_directory(tmp_path / "file")
    assert str(error.value) == f"{tmp_path / 'file'}: is a file, not a directory; choose another --out."

    tried = []

    def refused(dir=None, **kwargs):  # as a read-only folder answers (the tests run as root, who can write anywhere)
        tried.append(Path(dir))
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr("tempfile.TemporaryFile", refused)
    with pytest.raises(ModelDirectoryError) as error:
        writable_directory(tmp_path / "locked")
    assert str(error.value) == (
        f"{tmp_path / 'locked'}: cannot write there (Permission denied); choose a directory you can write to."
    )
    assert tried == [tmp_path / "locked"]  # the write is tried in the folder itself


def test_a_disk_with_exactly_the_bytes_needed_is_enough(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=2**30))
    require_space(tmp_path / "not" / "made", 2**30, "training this model")  # measured on the nearest existing parent
    with pytest.raises(ModelDirectoryError) as error:
        require_space(tmp_path, 2**30 + 2**20, "training this model")
    assert str(error.value) == (
        f"{tmp_path}: 1,024 MiB free, but training this model writes about 1,025 MiB; free some space or choose "
        "another --out."
    )


def test_a_locks_holder_is_read_whole_or_not_at_all(tmp_path):
    lock = tmp_path / ".kformer.lock"
    assert _lock_holder(lock) is None  # gone
    holder = {"pid": 12, "host": "h", "started": "2026-12-06 10:00:00"}
    for text in ("{not json", json.dumps([1, 2]), json.dumps({"pid": 12, "host": "h"})):
        lock.write_text(text)
        assert _lock_holder(lock) is None, text
    lock.write_text(json.dumps(holder))
    assert _lock_holder(lock) == holder


def test_a_holder_is_gone_when_its_process_ended_on_this_host_and_never_when_elsewhere():
    host = socket.gethostname()
    reaped = subprocess.Popen([sys.executable, "-c", "pass"])
    reaped.wait()
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped
    try:
        assert not _gone({"pid": os.getpid(), "host": host})  # this process: alive
        assert not _gone({"pid": str(os.getpid()), "host": host})  # as a lock file may hold it
        assert _gone({"pid": reaped.pid, "host": host})
        assert _gone({"pid": zombie.pid, "host": host})  # a zombie has ended too
        assert not _gone({"pid": reaped.pid, "host": host + "-elsewhere"})  # cannot be seen from here
    finally:
        zombie.wait()


def test_a_holder_is_judged_alive_when_in_doubt_and_its_state_read_after_the_last_parenthesis(monkeypatch):
    """Another user's process (kill answers PermissionError), a /proc that cannot be read: alive, so a live run's
    lock is never taken. A process whose name holds ")" has its state read after the last one."""
    host, pid = socket.gethostname(), os.getpid()
    stat = {}
    real_read_text = Path.read_text

    def read_text(self, *args, **kwargs):
        if str(self) != f"/proc/{pid}/stat":
            return real_read_text(self, *args, **kwargs)
        if "text" not in stat:
            raise OSError(errno.ENOENT, "No such file or directory")
        return stat["text"]

    monkeypatch.setattr(Path, "read_text", read_text)
    assert not _gone({"pid": pid, "host": host})  # /proc unreadable: alive
    stat["text"] = f"{pid} (odd) name) Z 1 1 1"
    assert _gone({"pid": pid, "host": host})  # a zombie named "odd) name"
    stat["text"] = f"{pid} (odd) name) S 1 1 1"
    assert not _gone({"pid": pid, "host": host})

    def another_users(pid, signal):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "kill", another_users)
    assert not _gone({"pid": pid, "host": host})
