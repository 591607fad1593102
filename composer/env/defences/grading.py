"""What of an agent's diff a grading run may see.

    from composer.env.defences import grading

    kept, reset = grading.source_only(diff, test_paths={"tests/test_ops.py"})
    grading.steers_tests("pkg/conftest.py")           # True: never taken from the agent
    grading.misread_findings({"conftest.py": None})   # ["conftest.py: ..."]: the patch wrote what grading resets
    grading.defined_classes(repo)                     # ["calc.shapes:Rect", ...]: the base's classes

A policy under RL forges any reward it can, and a submission is graded by running tests next to its code.
So a grading run (composer.env.real.swebench.evaluate) takes from the agent only the files that are neither tests nor
configuration of the test run: `steers_tests` names the rest (conftest.py anywhere; pytest.ini, .pytest.ini, tox.ini,
setup.cfg, pyproject.toml; *.pth; sitecustomize.py and usercustomize.py; compiled files (*.pyc, *.pyo, __pycache__/),
which Python would load instead of the source the scan reads; test files by pytest's default naming at the
repository's top or under a test/, tests/ or testing/ folder; the task's test_patch files, and beside them the
tests' own helpers and fixtures where no library code can be: every file in such a folder under a test folder at the
repository's top, and a file the diff creates in a test folder). Those come from the base commit and the test patch,
and every one the agent changed is listed as "reset". The names are those the patch tool writes: a part of the diff
goes when any name it gives is reset, names that patch reads otherwise than a parser (a space, a line separator)
are refused when it applies, and a written file grading would reset scores 0 (`misread_findings`). A folder's
name alone decides nothing: in real repositories `django/test/`, `sympy/testing/`, `lib/matplotlib/testing/` and
`astropy/tests/` are library source the library itself imports, and so are files named like tests elsewhere
(`pylint/testutils/lint_module_test.py`) and modules beside a test inside the package (`seaborn/_core.py` beside
`seaborn/conftest.py`); a fix there is graded with its change applied. The sandbox (composer.env.containment.sandbox)
pins pytest's configuration file, rootdir and confcutdir, so nothing outside the copy steers the run either, and
grading always runs cold in a fresh sandbox on a fresh copy, so nothing a run_tests call left behind is there.

What remains is the code under test itself, which runs in the test process: grading plants canaries among the
tests (composer.env.defences.canaries), makes the values the tests compare plain
(composer/env/containment/sandbox_plugin.py) and scans the changed source files' syntax trees
(composer.env.defences.tampering). Unlike this, the SWE-bench harness keeps every file the model changed except the test
patch's, a conftest.py included.
"""

import ast
from pathlib import Path, PurePosixPath

from composer.env.containment import patches

CONFIG_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml",
                          "sitecustomize.py", "usercustomize.py"})
# A file named like a test is a test at the repository's top or in such a folder; elsewhere it is library code
# (pylint/testutils/lint_module_test.py, astroid/test_utils.py: the libraries import them).
TEST_FOLDERS = frozenset({"test", "tests", "testing"})


def steers_tests(path: str, test_paths=frozenset(), new: bool = False) -> bool:
    """Whether `path` (repo-relative, posix) is a test or configures the test run: always taken from the base.
    `test_paths`: the task's test files (its test_patch's); `new`: the diff creates the file (see _beside_tests)."""
    p = PurePosixPath(path)
    name = p.name
    return (path in test_paths or name in CONFIG_NAMES or name.endswith((".pth", ".pyc", ".pyo"))
            or "__pycache__" in p.parts
            or (name.startswith("test_") and name.endswith(".py") or name.endswith("_test.py"))
            and (len(p.parts) == 1 or not TEST_FOLDERS.isdisjoint(p.parts[:-1]))
            or _beside_tests(p, test_paths, new))


def _beside_tests(p: PurePosixPath, test_paths, new: bool) -> bool:
    """A file in a folder that holds one of the task's test files is the tests' own where no library code can be:
    under a test folder at the repository's top (django's tests/admin_views/models.py, pytest's testing/), or where
    the diff creates it in a test folder (a module planted beside the tests, which their imports could find first).
    A file the base has beside a test inside the library's package is library code as often as not
    (seaborn/_core.py beside seaborn/conftest.py, astropy/tests/runner.py beside astropy/tests/test_logger.py): it is
    graded with its change, which the canaries, probes and plain values (which never trust a changed file as the
    tests' own) stand behind."""
    if p.parent not in {PurePosixPath(t).parent for t in test_paths} - {PurePosixPath(".")}:
        return False
    return p.parts[0] in TEST_FOLDERS or new and not TEST_FOLDERS.isdisjoint(p.parts[:-1])


def _files(diff: str) -> list[tuple[list[str], bool, str]]:
    """(every name, whether it creates the file, that file's part of the diff) for a unified diff, git-style or
    plain: the names as patches.diff_paths reads them (lines end at "\n" only, hunk bodies skipped)."""
    lines = patches.diff_lines(diff)
    outside = patches.header_lines(lines)
    starts = []  # where each file's part begins: its "diff --git" line, else its "--- " line
    for n, i in enumerate(outside):
        line = lines[i]
        if line.startswith("diff --git "):
            starts.append(i)
        elif line.startswith("--- ") and n + 1 < len(outside) and outside[n + 1] == i + 1 \
                and lines[i + 1].startswith("+++ ") \
                and not (starts and lines[starts[-1]].startswith("diff --git ")
                         and not any(x.startswith("@@") for x in lines[starts[-1]:i])):
            starts.append(i)
    chunks = []
    for a, b in zip(starts, starts[1:] + [len(lines)]):
        part = "".join(lines[a:b])
        new = any(x.startswith(("--- /dev/null", "new file mode")) for x in lines[a:b])
        chunks.append((patches.diff_paths(part) or [""], new, part))
    return chunks


def source_only(diff: str, test_paths=frozenset()) -> tuple[str, list[str]]:
    """(the diff without the files that steer_tests names, those files' paths). A file's part goes when any name it
    gives does: patch may write under either of a part's names (GNU patch picks the "best" of the old and new)."""
    kept, reset = [], []
    for names, new, chunk in _files(diff):
        if steering := [n for n in names if steers_tests(n, test_paths, new)]:
            reset += steering
        else:
            kept.append(chunk)
    return "".join(kept), sorted(set(reset))


def misread_findings(before: dict[str, bytes | None], test_paths=frozenset()) -> list[str]:
    """Decisive findings (they score 0, as the scan's do) for the files a patch wrote on disk that grading resets
    (`before`: each written file's bytes before, None where the patch created it): none after source_only, unless the
    patch tool read a name otherwise than grading did, and the graded copy holds a test or test configuration of the
    agent's."""
    return [f"{p}: the patch wrote it under a name grading reads otherwise, and grading resets it"
            for p in sorted(before) if steers_tests(p, test_paths, before[p] is None)]


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
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # nested deeper than Python compiles
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
