"""What of an agent's diff a grading run may see.

    from composer.env.defences import grading

    kept, reset = grading.source_only(diff, test_paths={"tests/test_ops.py"})
    grading.steers_tests("pkg/conftest.py")           # True: never taken from the agent
    grading.defined_classes(repo)                     # ["calc.shapes:Rect", ...]: the base's classes

A policy under RL forges any reward it can, and a submission is graded by running tests next to its code.
So a grading run (composer.env.real.swebench.evaluate) takes from the agent only the files that are neither tests nor
configuration of the test run: `steers_tests` names the rest (conftest.py anywhere; pytest.ini, .pytest.ini, tox.ini,
setup.cfg, pyproject.toml; *.pth; sitecustomize.py and usercustomize.py; compiled files (*.pyc, *.pyo, __pycache__/),
which Python would load instead of the source the scan reads; test files by pytest's default naming at the
repository's top or under a test/, tests/ or testing/ folder; the task's test_patch files and every file in a folder
that holds one of them: the tests' own helpers and fixtures). Those come from the base commit and the test patch, and
every one the agent changed is listed as "reset". A folder's name alone decides nothing: in real repositories
`django/test/`, `sympy/testing/`, `lib/matplotlib/testing/` and `astropy/tests/` are library source the library itself
imports, and so are files named like tests elsewhere (`pylint/testutils/lint_module_test.py`); a fix there is graded
with its change applied. The sandbox (composer.env.containment.sandbox) pins pytest's configuration file, rootdir and
confcutdir, so nothing outside the copy steers the run either, and grading always runs cold in a fresh sandbox on a
fresh copy, so nothing a run_tests call left behind is there.

What remains is the code under test itself, which runs in the test process: grading plants canaries among the
tests (composer.env.defences.canaries), makes the values the tests compare plain
(composer/env/containment/sandbox_plugin.py) and scans the changed source files' syntax trees
(composer.env.defences.tampering). Unlike this, the SWE-bench harness keeps every file the model changed except the test
patch's, a conftest.py included.
"""

import ast
from pathlib import Path, PurePosixPath

CONFIG_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml",
                          "sitecustomize.py", "usercustomize.py"})
# A file named like a test is a test at the repository's top or in such a folder; elsewhere it is library code
# (pylint/testutils/lint_module_test.py, astroid/test_utils.py: the libraries import them).
TEST_FOLDERS = frozenset({"test", "tests", "testing"})


def steers_tests(path: str, test_paths=frozenset()) -> bool:
    """Whether `path` (repo-relative, posix) is a test or configures the test run: always taken from the base.
    `test_paths`: the task's test files (its test_patch's); a file beside one of them (below the repository's top
    folder, which holds the library's own files too) is the tests' own."""
    p = PurePosixPath(path)
    name = p.name
    return (path in test_paths or name in CONFIG_NAMES or name.endswith((".pth", ".pyc", ".pyo"))
            or "__pycache__" in p.parts
            or (name.startswith("test_") and name.endswith(".py") or name.endswith("_test.py"))
            and (len(p.parts) == 1 or not TEST_FOLDERS.isdisjoint(p.parts[:-1]))
            or p.parent in {PurePosixPath(t).parent for t in test_paths} - {PurePosixPath(".")})


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


def defined_classes(repo: Path) -> list[str]:
    """"module:qualname" of every class the source files of `repo` (not its tests) define: the base's classes, whose
    values a grading run lets the tests compare as they are (composer/env/containment/plain_values.py)."""
    found = []
    for path in sorted(Path(repo).rglob("*.py")):
        rel = path.relative_to(repo).as_posix()
        if steers_tests(rel):
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, RecursionError):  # RecursionError: nested deeper than Python compiles
            continue
        # the name Python imports it by: a src/ or lib/ folder that is no package holds the packages (marshmallow,
        # pytest, matplotlib)
        top, _, rest = rel.partition("/")
        layout = top in ("src", "lib") and rest and not (Path(repo) / top / "__init__.py").exists()
        module = (rest if layout else rel).removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        stack = [(node, "") for node in tree.body]
        while stack:
            node, prefix = stack.pop()
            if isinstance(node, ast.ClassDef):
                found.append(f"{module}:{prefix}{node.name}")
                stack += [(child, f"{prefix}{node.name}.") for child in node.body]
    return sorted(found)
