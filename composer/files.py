"""Files no reader sees half-written, and content-addressed build folders.

    files.write_atomic("reports/005.json", text)                 # str or bytes: a new file renamed over the old
    key = files.config_hash(model="tiny", seed=0)                 # 16 hex digits naming a configuration
    files.publish(cache / f"model-{key}", lambda tmp: build(tmp))  # built aside, renamed into place once

A rename within a folder is atomic: a crash leaves the old file (or no target) and a stray temporary file, never a
half-written one, and a new inode means a write never goes through a hard link someone planted at the path.
"""

import contextlib
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
    complete. If another process published the same target while we built, rename fails and theirs wins.
    """
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
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
    return target
