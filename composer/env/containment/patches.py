"""Paths inside a repository copy, and the patches the trusted side applies to it.

    from composer.env.containment import patches

    patches.apply_unified_diff(repo, diff)   # -> ["calc/ops.py"]; PatchError (and nothing changed) if it fails
    patches.safe_path(repo, "calc/ops.py")   # SandboxError for ../x, /etc/passwd, escaping symlinks
    patches.diff_paths(diff)                 # the files a diff names
    patches.changed(patches.tree(repo), ...) # what changed on disk between two listings
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


_HEADER = re.compile(r"^(--- |\+\+\+ |rename from |rename to |copy from |copy to |Index: |diff --git )(.*)$")
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def diff_lines(diff: str) -> list[str]:
    """The diff's lines as the patch tool reads them: ended by "\n" only (str.splitlines also ends one at U+2028,
    U+0085, \f, ...: a name holding one would read as two lines here and one name to patch), ends kept."""
    parts = diff.split("\n")
    return [line + "\n" for line in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def header_lines(lines: list[str]) -> list[int]:
    """Indexes of the lines outside hunk bodies: a body's "--- x" is a removed line "-- x", no header; patch counts a
    hunk's lines from its "@@ -a,b +c,d @@", and so does this."""
    outside, old, new = [], 0, 0
    for i, line in enumerate(lines):
        tag = line[:1]
        if (old > 0 or new > 0) and tag in (" ", "-", "+", "\\", "\n", "\r", ""):  # a bare newline: context
            old -= tag not in ("+", "\\")
            new -= tag not in ("-", "\\")
            continue
        m = _HUNK.match(line)
        old, new = (int(m[1] or 1), int(m[2] or 1)) if m else (0, 0)
        outside.append(i)
    return outside


def _line_names(line: str) -> list[str]:
    """The repo-relative names (after -p1) one header line gives, as they are written: a name that would end at a
    space or hold other odd characters is returned whole, for check_names to refuse."""
    m = _HEADER.match(line.removesuffix("\n").removesuffix("\r"))
    if not m:
        return []
    kind, rest = m.groups()
    if kind == "diff --git ":
        names = rest.split(" ") if rest.count(" ") == 1 else [rest]
    else:
        names = [rest.split("\t")[0] if kind in ("--- ", "+++ ") else rest]
    if kind in ("--- ", "+++ ", "Index: ", "diff --git "):  # what patch -p1 strips
        names = [n.split("/", 1)[1] if "/" in n else n for n in names if n != "/dev/null"]
    return names


def diff_paths(diff: str) -> list[str]:
    """Every repo-relative path a diff names (after -p1) in any header patch reads a name from (---/+++, renames,
    copies, "diff --git", "Index:"), deletions and renames included."""
    lines = diff_lines(diff)
    return list(dict.fromkeys(name for i in header_lines(lines) for name in _line_names(lines[i])))


_BAD_NAME = re.compile(r'["\\\x00-\x1f\x7f]')


def check_names(paths: list[str]) -> None:
    """PatchError for a name that the patch tool and grading could read differently, or that leaves the copy: a
    space ends a name for GNU patch where no tab follows; a line separator (U+2028, U+0085) splits a line for Python
    but not for patch; quotes and backslashes are git's quoting; ".." and ".git" lead out of the sources."""
    for p in paths:
        if _BAD_NAME.search(p) or any(c.isspace() or not c.isprintable() for c in p):
            raise PatchError(f"unsupported file name in the diff: {p!r}; names with whitespace, quotes, backslashes, "
                             "control or line-separator characters are refused (the patch tool reads them otherwise "
                             "than grading): give the file a plain name")
        if not {"..", ".git"}.isdisjoint(Path(p).parts):
            raise PatchError(f"diff path escapes the repository's sources: {p!r}")


def tree(root: Path) -> dict[str, tuple]:
    """{repo-relative path: (mode, size, mtime, ctime, inode)} of everything under root but folders: a file a patch
    writes, creates or removes changes its entry, whatever name the diff gave it."""
    found, stack = {}, [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(Path(root) / rel))
        except OSError as e:  # a folder run code made unreadable: what a patch writes there could not be seen
            raise PatchError(f"cannot list {rel or '.'} ({e.strerror}): the files a patch changes cannot be known") \
                from None
        for e in entries:
            st = e.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                stack.append(f"{rel}{e.name}/")
            else:
                found[f"{rel}{e.name}"] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    return found


def changed(before: dict, after: dict) -> list[str]:
    """The paths whose entries differ between two tree()s (or two listings of the same shape)."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def _saved(repo: Path, paths: list[str]) -> dict:
    """What each path is now, to put back if a patch fails half-way: (mode, bytes) of a file, else None."""
    saved = {}
    for p in paths:
        target = repo / p
        st = os.lstat(target) if os.path.lexists(target) else None
        saved[p] = (stat.S_IMODE(st.st_mode), target.read_bytes()) if st and stat.S_ISREG(st.st_mode) else None
    return saved


def _restore(repo: Path, saved: dict, dirs_before: set[str], made: list[str]) -> None:
    """Put back the named files and remove `made` (files under names the diff did not give); a file the patch
    tool rewrote under such a name cannot be put back (only an agent's own copy or a grading copy, thrown away after
    the error, is ever patched)."""
    for p in made:
        with contextlib.suppress(OSError):
            os.unlink(repo / p)
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
    """Apply a unified diff (git-style or plain, -p1) atomically; returns the files it changed on disk, as the tree
    says after the patch tool ran, not as the diff's headers read: grading takes its changed paths from here.

    Every named path must stay inside repo_dir (no '..', no absolute path, no symlink that leads out) and be a plain
    name (check_names: no whitespace, quotes, backslashes, control or line-separator characters, which patch reads
    otherwise than a parser of headers); every file written must be one the headers name and a regular file (no
    symlink, no device). A diff that fails any of this, or does not apply cleanly, changes nothing and raises
    PatchError."""
    if not diff.strip():
        raise PatchError("empty diff")
    repo = Path(repo_dir).resolve()
    paths = diff_paths(diff)
    if not paths:
        raise PatchError("no file headers (---/+++) found in the diff")
    check_names(paths)
    for p in paths:
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
    files_before = tree(repo)
    written = []
    try:
        for cmd in steps:
            try:
                r = subprocess.run(cmd, cwd=repo, input=diff, text=True, capture_output=True, timeout=60, env=env)
            except subprocess.TimeoutExpired:
                raise PatchError(f"{cmd[0]} timed out") from None
            if r.returncode != 0:
                raise PatchError(f"{cmd[0]} failed ({r.returncode}): {(r.stdout + r.stderr).strip()[:4000]}")
        written = changed(files_before, tree(repo))
        if unnamed := sorted(set(written) - set(paths)):
            raise PatchError(f"the patch tool wrote {unnamed[:5]}, which no header of the diff names: refused")
        for p in written:
            st = os.lstat(repo / p) if os.path.lexists(repo / p) else None
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise PatchError(f"{p}: the diff makes it something other than a regular file (a symlink?)")
    except BaseException:
        _restore(repo, saved, dirs_before, [p for p in written if p not in files_before and p not in saved])
        raise
    return written
