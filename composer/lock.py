"""One run at a time in a run directory: two runs resuming the same store would pay for the same calls twice.

    with lock.run_lock("runs/001"):      # or RunDirBusy naming the run that holds it
        ...

An exclusive flock on <dir>/.lock, which the kernel drops when its holder exits however it exits (kill -9
included), so a crashed run never leaves a stale lock behind. The file says who holds it, for the message.
"""

import fcntl
import json
import os
import socket
import sys
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

LOCK_FILE = ".lock"


class RunDirBusy(RuntimeError):
    """Another live process holds the run directory."""


@contextmanager
def run_lock(directory):
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirBusy(f"{directory} is in use by another run ({_holder(path)}); wait for it to finish or "
                             "choose another run directory") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": _command(),
                                 "started": datetime.now(UTC).isoformat(timespec="seconds")}).encode())
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would race a waiting run's open)


def _command() -> str:
    """This process's command line as ps shows it (sys.argv lacks the interpreter's own options, e.g. -m)."""
    try:
        return Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    except OSError:
        return " ".join(sys.argv)


def _holder(path: Path) -> str:
    try:
        who = json.loads(path.read_text())
        return f"pid {who['pid']} on {who['host']} since {who['started']}: {who['command']}"
    except (OSError, ValueError, KeyError):
        return "holder unknown"
