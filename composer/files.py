"""Files no reader sees half-written, and content-addressed build folders.

    files.write_atomic("reports/005.json", text)                 # str or bytes: a new file renamed over the old
    key = files.config_hash(model="tiny", seed=0)                 # 16 hex digits naming a configuration
    files.publish(cache / f"model-{key}", lambda tmp: build(tmp))  # built aside, renamed into place once

A rename within a folder is atomic: a crash leaves the old file (or no target) and a stray temporary file, never a
half-written one, and a new inode means a write never goes through a hard link someone planted at the path.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path


def write_atomic(path, data: str | bytes, *, mode: int = 0o644, sync: bool = False) -> None:
    """Write data (text as UTF-8, newlines untouched) to path by renaming a sibling temporary file over it.
    sync: fsync before the rename, for a file whose loss a power cut must not cause (a resumable log)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp's 0600 would hide a report or an edited source from other readers
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def config_hash(**payload) -> str:
    """A short stable name for a configuration: sha256 of its sorted JSON (str() for anything else)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def publish(target: Path, build) -> Path:
    """Return target, first running build(tmp) in a sibling temp dir and renaming it into place if absent.

    The rename is atomic, so a crash mid-build leaves only a stray .tmp dir, never a target that looks
    complete. One build per target at a time: a second caller (two notebooks, two test workers needing the same
    model) waits on the builder's lock, a sibling .<name>.lock that the kernel releases however the builder exits,
    and then finds the target built. The builder removes the lock file when it is done; should two callers still
    build at once (one arriving just as a failed build let go), rename fails for the second and the first one wins.
    """
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path = target.parent / f".{target.name}.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():  # built by the caller we waited for
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        tmp.chmod(0o755)  # mkdtemp's 0700 would make a shared cache unreadable to other users
        try:
            build(tmp)
            try:
                os.replace(tmp, target)
            except OSError:
                if not target.exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            lock_path.unlink(missing_ok=True)
    return target
