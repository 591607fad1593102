"""What of an agent's diff a grading run may see, and what in it looks like tampering with the test run.

    from composer.env import grading

    kept, reset = grading.source_only(diff, test_paths={"tests/test_ops.py"})
    grading.steers_tests("pkg/conftest.py")           # True: never taken from the agent
    grading.scan(kept)                                # ["os._exit in calc/ops.py:12", ...]

A policy under RL forges any reward it can, and a submission is graded by running tests next to its code.
So a grading run (composer.env.swebench.evaluate on embedded records) takes from the agent only the files
that are neither tests nor configuration of the test run: `steers_tests` names the rest (conftest.py
anywhere; pytest.ini, .pytest.ini, tox.ini, setup.cfg, pyproject.toml; *.pth; sitecustomize.py and
usercustomize.py; test files by pytest's default naming and anything under a tests/ or testing/ folder;
the task's test_patch files). Those come from the base commit and the test patch, and every one the agent
changed is listed as "reset". The sandbox (composer.env.sandbox) pins pytest's configuration file, rootdir
and confcutdir, so nothing outside the copy steers the run either, and grading always runs cold in a fresh
sandbox on a fresh copy, so nothing a run_tests call left behind is there.

What remains is code under test that patches pytest (or the outcome plugin) from inside the test process
when it is imported: no separation within one process can stop it. `scan` looks for it in the lines the
agent added to source files: pytest's internals, hook names, ending the process (os._exit, os.kill),
/proc/self, the sandbox's variables, interpreter-level patching (sys.modules, builtins, gc.get_objects,
sys.settrace/setprofile, ctypes, atexit, signal handlers, faulthandler). A flagged submission scores 0 by
default (`EnvConfig.flag_tampering`, `evaluate(flag_tampering=...)`); real repositories whose fixes use
such names (pytest's own, say) turn it off and rely on the reset files alone. Unlike this, the SWE-bench
harness keeps every file the model changed except the test patch's, a conftest.py included.
"""

import re
from pathlib import PurePosixPath

CONFIG_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml",
                          "sitecustomize.py", "usercustomize.py"})
TEST_DIRS = frozenset({"tests", "test", "testing"})

# (what it is, pattern over one added line). Words, not substrings: "gcd" is not "gc.".
TAMPERING = [
    ("pytest internals", r"\b_pytest\b|\bimport\s+pytest\b|\bfrom\s+pytest\b|\bpytest\s*\."),
    ("a pytest hook", r"\bpytest_[a-z_]+\s*\("),
    ("ending the process", r"\bos\s*\.\s*(_exit|kill|killpg|abort)\b"),
    ("/proc/self", r"/proc/(self|\d+|thread-self)\b"),
    ("the sandbox's variables", r"COMPOSER_SANDBOX|PYTEST_CURRENT_TEST|PYTEST_ADDOPTS|PYTEST_PLUGINS"),
    ("sys.modules", r"\bsys\s*\.\s*modules\b"),
    ("builtins", r"\bbuiltins\b|__builtins__"),
    ("gc introspection", r"\bgc\s*\.\s*(get_objects|get_referrers|get_referents)\b"),
    ("tracing hooks", r"\bsys\s*\.\s*(settrace|setprofile|addaudithook|_getframe)\b"),
    ("ctypes", r"\bctypes\b"),
    ("atexit", r"\batexit\b"),
    ("signal handlers", r"\bsignal\s*\.\s*(signal|setitimer|alarm)\b"),
    ("faulthandler", r"\bfaulthandler\b"),
]
_TAMPERING = [(what, re.compile(pattern)) for what, pattern in TAMPERING]


def steers_tests(path: str, test_paths=frozenset()) -> bool:
    """Whether `path` (repo-relative, posix) is a test or configures the test run: always taken from the base."""
    p = PurePosixPath(path)
    name = p.name
    return (path in test_paths or name in CONFIG_NAMES or name.endswith(".pth")
            or (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py")
            or any(part in TEST_DIRS for part in p.parts[:-1]))


def _name(header: str) -> str | None:
    name = header[4:].split("\t")[0].strip()
    return None if name == "/dev/null" else name.split("/", 1)[1] if "/" in name else name


def _files(diff: str) -> list[tuple[str, str]]:
    """(path, that file's part of the diff) for a unified diff, git-style or plain (-p1 paths)."""
    lines = diff.splitlines(keepends=True)
    starts = []  # where each file's part begins: its "diff --git" line, else its "--- " line
    for i, line in enumerate(lines):
        if line.startswith("diff --git "):
            starts.append(i)
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ") \
                and not (starts and lines[starts[-1]].startswith("diff --git ")
                         and not any(x.startswith("@@") for x in lines[starts[-1]:i])):
            starts.append(i)
    chunks = []
    for a, b in zip(starts, starts[1:] + [len(lines)]):
        part = lines[a:b]
        old = next((x for x in part if x.startswith("--- ")), None)
        new = next((x for x in part if x.startswith("+++ ")), None)
        path = (new and _name(new)) or (old and _name(old))
        if path is None and part[0].startswith("diff --git "):  # a mode-only change or an empty file
            path = part[0].rstrip("\n").split(" b/", 1)[-1]
        chunks.append((path or "", "".join(part)))
    return chunks


def source_only(diff: str, test_paths=frozenset()) -> tuple[str, list[str]]:
    """(the diff without the files that steer_tests names, those files' paths)."""
    kept, reset = [], []
    for path, chunk in _files(diff):
        if steers_tests(path, test_paths):
            reset.append(path)
        else:
            kept.append(chunk)
    return "".join(kept), sorted(set(reset))


def scan(diff: str) -> list[str]:
    """What in the added lines of `diff` looks like tampering with the test run: "what in path:line" each."""
    found = []
    for path, chunk in _files(diff):
        line_no = 0
        for line in chunk.splitlines():
            if line.startswith("@@"):
                line_no = int(line.split("+")[1].split(",")[0].split()[0]) - 1
            elif line.startswith("+") and not line.startswith("+++"):
                line_no += 1
                code = line[1:].split("#")[0]
                found += [f"{what} in {path}:{line_no}" for what, pattern in _TAMPERING if pattern.search(code)]
            elif not line.startswith(("-", "\\")):
                line_no += 1
    return found
