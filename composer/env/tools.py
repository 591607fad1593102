"""The file tools of the coding environment, as plain functions on a repository folder.

    from composer.env import tools

    tools.list_files(repo, ".")                                 # one path per line
    tools.view(repo, "calc/stats.py", 10, 20)                   # numbered lines 10..20
    tools.search(repo, r"def \\w+", "calc")                      # "calc/stats.py:4: def median(xs):" ...
    tools.edit(repo, "calc/stats.py", 12, 12, "    return s[mid]\\n", max_bytes=20_000)
    tools.apply_patch(repo, diff, max_bytes=20_000)             # -> ["calc/stats.py"]
    before = tools.snapshot(repo); ...; tools.repo_diff(before, repo, exclude={"tests/test_stats.py"})

Each tool takes the repository root first and raises ToolError with a message written for the
model (bad path, binary file, oversized edit, bad regex...); composer.env.environment turns it
into an error observation. Every path goes through patches.safe_path, so no tool reads or
writes outside the root, through symlinks included. Text means UTF-8 without NUL bytes: other
files are "binary" and refused, and so is such content in an edit. Lines are split on "\\n" only,
so view's numbers are edit's numbers, whatever other separators (\\r, \\f) a line holds.

Files over MAX_FILE_BYTES are refused too: the agent's own code, run by run_tests, can write
anything into the repository, and these tools run in the trusted process. For the same reason
only regular files are read or listed (a FIFO planted there would block a read forever; file
names that are not UTF-8 are left out), search uses RE2 (google-re2: linear time in the text,
compile memory capped at RE2_MAX_MEM, so neither a backtracking pattern like `^(a|aa)+$` nor a
pattern whose automaton explodes can hold the process), and edit replaces files by rename
rather than writing into them (a hard link planted by that code would otherwise carry the write
to a file outside the repository).
"""

import difflib
import os
import stat
import time
from pathlib import Path

import re2

from composer.env.containment import patches
from composer.files import write_atomic

MAX_FILE_BYTES = 1_000_000
LINE_CLIP = 200  # characters of a matching line that search shows
RE2_MAX_MEM = 8 << 20  # bytes RE2 may use to compile one pattern


class ToolError(Exception):
    """A tool call that cannot be carried out; str() is what the model is told."""


def _resolve(root: Path, rel) -> Path:
    try:
        return patches.safe_path(root, rel)
    except patches.SandboxError as e:
        raise ToolError(str(e)) from None
    except UnicodeEncodeError:  # a lone surrogate (JSON "\\ud800") names no file
        raise ToolError(f"bad path: {rel!r}") from None


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(Path(root).resolve()).as_posix() or "."


def _decode(data: bytes, what: str) -> str:
    if b"\0" in data:
        raise ToolError(f"{what} is binary (contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{what} is binary (not valid UTF-8)") from None


def _read_text(root: Path, rel: str) -> tuple[Path, str]:
    path = _resolve(root, rel)
    if path.is_dir():
        raise ToolError(f"{rel} is a directory (use list_files)")
    if not path.is_file():
        raise ToolError(f"{rel}: no such file")
    data = patches.read_regular(path, MAX_FILE_BYTES + 1)
    if data is None:
        raise ToolError(f"{rel} is not a regular file")
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"{rel} is larger than {MAX_FILE_BYTES} bytes")
    return path, _decode(data, rel)


def _lines(text: str) -> list[str]:
    """Lines without their "\\n"; a final newline does not start another line."""
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _numbered(lines: list[str], first: int) -> str:
    width = len(str(first + len(lines) - 1))
    return "\n".join(f"{first + i:>{width}} | {line}" for i, line in enumerate(lines))


def _utf8_name(name: str) -> bool:
    try:
        name.encode("utf-8")  # a name that is not UTF-8 on disk decodes to lone surrogates, which do not encode
        return True
    except UnicodeEncodeError:
        return False


def _files(base: Path) -> list[Path]:
    """Regular files under base (or base itself), sorted; symlinks, FIFOs, devices and non-UTF-8 names are left
    out, and so are folders with such names."""
    if base.is_file():
        return [base]
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if _utf8_name(d))
        out += [Path(dirpath) / f for f in sorted(filenames)
                if _utf8_name(f) and stat.S_ISREG(os.lstat(os.path.join(dirpath, f)).st_mode)]
    return out


def list_files(root: Path, path: str = ".", *, limit: int = 200) -> str:
    base = _resolve(root, path)
    if not base.exists():
        raise ToolError(f"{path}: no such file or directory")
    files = [_rel(root, f) for f in _files(base)]
    if not files:
        return f"{path}: no files"
    more = f"\n... ({len(files) - limit} more; list a subdirectory)" if len(files) > limit else ""
    return "\n".join(files[:limit]) + more


def view(root: Path, path: str, start: int = 1, end: int | None = None, *, max_lines: int = 200) -> str:
    _, text = _read_text(root, path)
    lines = _lines(text)
    n = len(lines)
    if n == 0:
        return f"{path} is empty"
    if start < 1 or start > n:
        raise ToolError(f"start={start} is outside {path} (lines 1-{n})")
    end = n if end is None else min(end, n)
    if end < start:
        raise ToolError(f"end={end} is before start={start}")
    last = min(end, start + max_lines - 1)
    more = f"\n... (lines {last + 1}-{end} not shown: view with start={last + 1})" if last < end else ""
    return f"{path} (lines {start}-{last} of {n})\n" + _numbered(lines[start - 1:last], start) + more


def _compile(pattern: str):
    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    options.log_errors = False  # RE2 would print each refused pattern to stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        why = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ToolError(f"bad or unsupported regular expression {pattern!r}: {why} (RE2 syntax: no backreferences "
                        "or lookaround; a pattern too large to compile is refused)") from None


def search(root: Path, pattern: str, path: str = ".", *, max_matches: int = 50, timeout_s: float = 2.0) -> str:
    if not pattern or len(pattern) > 1000:
        raise ToolError("pattern must be 1 to 1000 characters")
    compiled = _compile(pattern)
    base = _resolve(root, path)
    if not base.exists():
        raise ToolError(f"{path}: no such file or directory")
    deadline = time.monotonic() + timeout_s
    hits = []
    for f in _files(base):
        data = patches.read_regular(f, MAX_FILE_BYTES + 1)
        if data is None or len(data) > MAX_FILE_BYTES:
            continue
        try:
            text = _decode(data, "")
        except ToolError:
            continue  # binary files are skipped, like grep -I
        if time.monotonic() > deadline:  # linear per line, but a repository can hold many lines
            raise ToolError(f"search took longer than {timeout_s:g}s: search a subdirectory")
        for lineno, line in enumerate(_lines(text), 1):
            if compiled.search(line):
                shown = line.strip()
                hits.append(f"{_rel(root, f)}:{lineno}: {shown[:LINE_CLIP]}{'...' if len(shown) > LINE_CLIP else ''}")
                if len(hits) == max_matches:
                    return "\n".join(hits) + f"\n... (stopped at {max_matches} matches)"
    return "\n".join(hits) if hits else f"no matches for {pattern!r} in {path}"


def _check_text(text: str, what: str, max_bytes: int) -> None:
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ToolError(f"{what} is not valid UTF-8 text") from None
    if size > max_bytes:
        raise ToolError(f"{what} is {size} bytes; the limit is {max_bytes}")
    if "\0" in text:
        raise ToolError(f"{what} contains NUL bytes (binary content is not allowed)")


def edit(root: Path, path: str, start: int, end: int, new_text: str, *, max_bytes: int) -> str:
    """Replace lines start..end (1-based, inclusive) with new_text. end = start - 1 inserts before
    start; new_text "" deletes; start=1, end=0 on a missing file creates it."""
    _check_text(new_text, "new_text", max_bytes)
    target = _resolve(root, path)
    if target.exists():
        target, text = _read_text(root, path)
    elif start == 1 and end == 0:
        try:  # a name patch would read otherwise than grading (a space, a line separator) never enters a diff
            patches.check_names([Path(path).as_posix()])
        except patches.SandboxError as e:
            raise ToolError(str(e)) from None
        target.parent.mkdir(parents=True, exist_ok=True)
        text = ""
    else:
        raise ToolError(f"{path}: no such file (to create it, use start=1, end=0)")
    lines = _lines(text)
    n = len(lines)
    if not 1 <= start <= n + 1:
        raise ToolError(f"start={start} is outside {path} (lines 1-{n}; {n + 1} appends)")
    if not start - 1 <= end <= n:
        raise ToolError(f"end={end} must be between start-1={start - 1} (insert) and {n} (the last line)")
    new = _lines(new_text)
    result = lines[:start - 1] + new + lines[end:]
    out = "\n".join(result) + ("\n" if result else "")
    if len(out.encode("utf-8")) > MAX_FILE_BYTES:
        raise ToolError(f"the edit would make {path} larger than {MAX_FILE_BYTES} bytes")
    write_atomic(target, out)  # by rename: never through a hard link, never a half-written file
    lo, hi = max(start - 3, 1), min(start + len(new) + 2, len(result))
    shown = _numbered(result[lo - 1:hi], lo) if result else "(the file is now empty)"
    return f"{path}: replaced lines {start}-{end} with {len(new)} line(s); lines {lo}-{hi} now read:\n{shown}"


def apply_patch(root: Path, diff: str, *, max_bytes: int) -> list[str]:
    _check_text(diff, "the diff", max_bytes)
    try:
        return patches.apply_unified_diff(root, diff)
    except patches.SandboxError as e:
        raise ToolError(str(e)) from None


# --- what the agent changed -------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, bytes]:
    """{relative path: content} of the regular files under root, up to MAX_FILE_BYTES each."""
    root = Path(root).resolve()
    files = {_rel(root, f): patches.read_regular(f, MAX_FILE_BYTES + 1) for f in _files(root)}
    return {rel: data for rel, data in files.items() if data is not None and len(data) <= MAX_FILE_BYTES}


def _keep_ends(text: str) -> list[str]:
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _plain_name(rel: str) -> bool:
    try:
        patches.check_names([rel])
        return True
    except patches.SandboxError:
        return False


def repo_diff(before: dict[str, bytes], root: Path, *, exclude=frozenset()) -> tuple[str, list[str]]:
    """(git-style diff from `before` to the files now under root, paths left out of it).

    Paths in `exclude` are ignored; changed files that are binary or over MAX_FILE_BYTES cannot
    be expressed as a text diff, and names that patch reads otherwise than grading (patches.check_names: a space, a
    line separator, which code run by run_tests can give a file) cannot be graded: all are returned as left out. The
    diff applies with `patch -p1`."""
    root = Path(root).resolve()
    after, left_out = {}, []
    for f in _files(root):
        rel = _rel(root, f)
        if rel in exclude:
            continue
        data = patches.read_regular(f, MAX_FILE_BYTES + 1)
        if data is None or len(data) > MAX_FILE_BYTES:
            left_out.append(rel)
        else:
            after[rel] = data
    out = []
    for path in sorted((set(before) | set(after)) - set(exclude) - set(left_out)):
        a, b = before.get(path), after.get(path)
        if a == b:
            continue
        if not _plain_name(path):
            left_out.append(path)
            continue
        try:
            old, new = (None if x is None else _decode(x, path) for x in (a, b))
        except ToolError:
            left_out.append(path)
            continue
        names = ("/dev/null" if old is None else f"a/{path}", "/dev/null" if new is None else f"b/{path}")
        hunks = list(difflib.unified_diff(_keep_ends(old or ""), _keep_ends(new or ""), *names))
        if not hunks:  # an empty file created or deleted: nothing a text patch can say
            continue
        mode = "new file mode 100644\n" if old is None else "deleted file mode 100644\n" if new is None else ""
        out.append(f"diff --git a/{path} b/{path}\n{mode}")
        out += [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in hunks]
    return "".join(out), sorted(left_out)
