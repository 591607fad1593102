"""Paths inside a repository copy, and the patches the trusted side applies to it.

    from composer.env.containment import patches

    patches.apply_unified_diff(repo, diff)   # -> ["calc/ops.py"]; PatchError (and nothing changed) if it fails
    patches.safe_path(repo, "calc/ops.py")   # SandboxError for ../x, /etc/passwd, escaping symlinks
    patches.diff_paths(diff)                 # the files a diff names
    patches.read_regular(path, limit)        # a file's bytes, never following a link or opening a FIFO

The trusted side (the environment's tools, grading, task generation) works on files a policy's code could have
written: every path is checked to stay inside the copy, every diff applies whole or not at all.
"""

import contextlib
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

from composer.env.containment.limits import SandboxError, scrubbed_env


class PatchError(SandboxError):
    """A diff that does not apply; the message carries the patch tool's output."""


def read_regular(path: Path, limit: int) -> bytes | None:
    """Up to `limit` bytes of path if it is a regular file (no symlink, FIFO or device followed), else None.
    The trusted side reads files that run code could have replaced with a FIFO (which would block forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(limit)


def safe_path(root: Path, rel: str) -> Path:
    """The resolved path of `rel` inside `root`; SandboxError if it is absolute or escapes it."""
    if not isinstance(rel, str) or "\0" in rel:
        raise SandboxError(f"bad path: {rel!r}")
    if os.path.isabs(rel) or rel.startswith("~"):
        raise SandboxError(f"absolute path not allowed: {rel!r}")
    base = Path(root).resolve()
    path = (base / rel).resolve()  # follows symlinks, so a link pointing outside is caught here
    if path != base and base not in path.parents:
        raise SandboxError(f"path escapes the repository: {rel!r}")
    return path


_HEADER = re.compile(r"^(?:--- |\+\+\+ |rename from |rename to |copy from |copy to )(.*)$")


def diff_paths(diff: str) -> list[str]:
    """Every repo-relative path a diff names (after -p1), deletions and renames included."""
    paths = []
    for line in diff.splitlines():
        m = _HEADER.match(line)
        if not m:
            continue
        name = m.group(1).split("\t")[0].strip()
        if name == "/dev/null":
            continue
        if line.startswith(("--- ", "+++ ")):
            name = name.split("/", 1)[1] if "/" in name else name  # what patch -p1 strips
        paths.append(name)
    return list(dict.fromkeys(paths))


_BAD_NAME = re.compile(r'["\\\x00-\x1f\x7f]')


def _saved(repo: Path, paths: list[str]) -> dict:
    """What each path is now, to put back if a patch fails half-way: (mode, bytes) of a file, else None."""
    saved = {}
    for p in paths:
        target = repo / p
        st = os.lstat(target) if os.path.lexists(target) else None
        saved[p] = (stat.S_IMODE(st.st_mode), target.read_bytes()) if st and stat.S_ISREG(st.st_mode) else None
    return saved


def _restore(repo: Path, saved: dict, dirs_before: set[str]) -> None:
    for p, state in saved.items():
        target = repo / p
        if os.path.lexists(target) and not os.path.isdir(target) or os.path.islink(target):
            os.unlink(target)
        if state is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(state[1])
            os.chmod(target, state[0])
    for dirpath, _, _ in sorted(os.walk(repo), key=lambda d: -len(d[0])):  # folders the patch made, if now empty
        if os.path.relpath(dirpath, repo) not in dirs_before:
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


def _patch_tool() -> str:
    return "patch" if shutil.which("patch") else "git"


def apply_unified_diff(repo_dir: Path, diff: str) -> list[str]:
    """Apply a unified diff (git-style or plain, -p1) atomically; returns the files it touches.

    Every named path must stay inside repo_dir (no '..', no absolute path, no symlink that
    leads out) and be a plain name (no quotes, backslashes or control characters, which git writes for
    names that are not plain text); the result must be regular files (no symlink, no device). A diff that
    fails any of this, or does not apply cleanly, changes nothing and raises PatchError."""
    if not diff.strip():
        raise PatchError("empty diff")
    repo = Path(repo_dir).resolve()
    paths = diff_paths(diff)
    if not paths:
        raise PatchError("no file headers (---/+++) found in the diff")
    for p in paths:
        if _BAD_NAME.search(p):
            raise PatchError(f"unsupported file name in the diff (quotes, backslashes or control characters): {p!r}")
        if ".." in Path(p).parts:
            raise PatchError(f"diff path escapes the repository: {p!r}")
        try:
            safe_path(repo, p)
        except SandboxError as e:
            raise PatchError(str(e)) from None
    if not diff.endswith("\n"):
        diff += "\n"
    if _patch_tool() == "patch":  # patch is not atomic across files: dry-run first
        base = ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "--reject-file=-", "-d", str(repo)]
        steps = [base + ["--dry-run"], base]
        env = None
    else:  # git apply is atomic; the ceiling keeps it from using an enclosing repository's root
        steps = [["git", "apply", "--whitespace=nowarn", "-p1"]]
        env = {**scrubbed_env(), "GIT_CEILING_DIRECTORIES": str(repo.parent)}
    saved = _saved(repo, paths)
    dirs_before = {os.path.relpath(d, repo) for d, _, _ in os.walk(repo)}
    try:
        for cmd in steps:
            try:
                r = subprocess.run(cmd, cwd=repo, input=diff, text=True, capture_output=True, timeout=60, env=env)
            except subprocess.TimeoutExpired:
                raise PatchError(f"{cmd[0]} timed out") from None
            if r.returncode != 0:
                raise PatchError(f"{cmd[0]} failed ({r.returncode}): {(r.stdout + r.stderr).strip()[:4000]}")
        for p in paths:
            st = os.lstat(repo / p) if os.path.lexists(repo / p) else None
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise PatchError(f"{p}: the diff makes it something other than a regular file (a symlink?)")
    except BaseException:
        _restore(repo, saved, dirs_before)
        raise
    return sorted(paths)
