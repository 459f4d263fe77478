"""Files a run writes safely: atomic writes, the lock that keeps one run to a directory, disk space checks."""

import contextlib
import glob
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

LOCK_FILE = ".kformer.lock"


class ModelDirectoryError(ValueError):
    """A model directory that is missing, incomplete or inconsistent."""


def umask():
    """The process's file-creation mask (os.umask can only be read by setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(path, write):
    """Calls write(temporary_path), then renames it to `path`: never a half-written file.

    The temporary file ends like `path` does, compound suffix and all, since
    Keras reads the kind of file from its name (`.keras`, `.weights.h5`). It
    gets the user's normal permissions (0666 less the umask), not the 0600
    that `mkstemp` creates it with, so a serving process running as another
    user can read it. Temporary files of earlier writes to `path` that a
    killed process left (a backup written every few hundred steps would
    otherwise gather one a kill) are deleted first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = "".join(path.suffixes)
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*{glob.escape(suffix)}"):
        leftover.unlink(missing_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(handle)
    os.chmod(temporary, 0o666 & ~umask())
    try:
        write(temporary)
        os.replace(temporary, path)
    except OSError as error:  # disk full, permissions: name the file the user knows, not the temporary one
        Path(temporary).unlink(missing_ok=True)
        if error.errno is None:
            raise
        raise OSError(error.errno, error.strerror, str(path)) from error
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json(path, data):
    """Writes `data` as indented JSON, atomically."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    write_atomically(path, lambda temporary: Path(temporary).write_text(text, encoding="utf-8"))


def writable_directory(directory):
    """`directory`, made if missing, once it is known to be a directory this process can write to."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ModelDirectoryError(f"{directory}: is a file, not a directory; choose another --out.")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as error:
        raise ModelDirectoryError(
            f"{directory}: cannot write there ({error.strerror}); choose a directory you can write to."
        ) from None
    return directory


@contextlib.contextmanager
def run_lock(directory):
    """Holds `directory` for one writing run: a second run into it refuses while this one lives.

    The lock is a file holding this process's pid, host and start time,
    created whole in one step (a link of a finished file). A lock whose
    process is gone (killed, on this host) is stale and taken over, so an
    interrupted run resumes; one held by a live process, or by a process on
    another host (whose liveness this host cannot see), refuses with a
    `ModelDirectoryError` that names it.
    """
    directory = writable_directory(directory)
    path = directory / LOCK_FILE
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    with tempfile.NamedTemporaryFile("w", dir=directory, prefix=".lock-", delete=False) as draft:
        json.dump(mine, draft)
    try:
        while True:
            try:
                os.link(draft.name, path)
                break
            except FileExistsError:
                holder = _lock_holder(path)
                if holder is not None and not _gone(holder):
                    elsewhere = holder["host"] != mine["host"]
                    raise ModelDirectoryError(
                        f"{directory}: another kformer run is writing it (pid {holder['pid']} on {holder['host']}, "
                        f"started {holder['started']}); wait for it to end or choose another --out"
                        + (f" (if that run is gone, delete {path})." if elsewhere else ".")
                    ) from None
                path.unlink(missing_ok=True)  # stale: the run that wrote it is gone
    finally:
        os.unlink(draft.name)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def _lock_holder(path):
    """The {pid, host, started} a lock file holds; None when it is unreadable or gone."""
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
        return holder if isinstance(holder, dict) and {"pid", "host", "started"} <= holder.keys() else None
    except (OSError, ValueError):
        return None


def _gone(holder):
    """Whether the process that took a lock has ended (known only on this host)."""
    if holder["host"] != socket.gethostname():
        return False
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    try:  # a killed process its parent has not reaped yet is a zombie: ended too
        return Path(f"/proc/{holder['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def require_space(directory, needed, writing, error=ModelDirectoryError):
    """Refuses to start writing `needed` bytes into `directory` when its disk has less free.

    Args:
        directory: where the bytes go; the space is measured on it, or on its
            nearest existing parent.
        needed: the bytes to be written, about.
        writing: what writes them, for the message ("training this model").
        error: the exception class to raise.

    Raises:
        error: less free space than that; the message gives both sizes.
    """
    directory = Path(directory)
    free = shutil.disk_usage(next(p for p in (directory, *directory.parents) if p.exists())).free
    if free < needed:
        raise error(
            f"{directory}: {free / 2**20:,.0f} MiB free, but {writing} writes about "
            f"{needed / 2**20:,.0f} MiB; free some space or choose another --out."
        )
