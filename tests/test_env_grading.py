"""composer.env.defences.grading: what of an agent's diff grading takes."""

import pytest

from composer.env.defences import grading
from real_fixes import commit_paths, real_fixes

GIT = ("diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -3,2 +3,3 @@\n x = 1\n"
       "+import ctypes\n y = 2\n"
       "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
       "@@ -0,0 +1 @@\n+import pytest\n")
PLAIN = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n--- a/tests/test_mod.py\n+++ b/tests/test_mod.py\n" \
        "@@ -1 +1 @@\n-assert 0\n+assert 1\n"


@pytest.mark.parametrize("path, steers", [
    ("conftest.py", True), ("pkg/sub/conftest.py", True), ("pytest.ini", True), ("tox.ini", True),
    ("setup.cfg", True), ("pyproject.toml", True), ("x.pth", True), ("sitecustomize.py", True),
    ("test_ops.py", True), ("ops_test.py", True), ("tests/test_ops.py", True), ("pkg/tests/sub/test_x.py", True),
    ("sympy/testing/tests/test_code_quality.py", True), ("testing/ops_test.py", True), ("test/test_ops.py", True),
    ("calc/__pycache__/ops.cpython-311.pyc", True), ("calc/ops.pyc", True), ("calc/__pycache__/x.txt", True),
    ("calc/ops.py", False), ("calc/contest.py", False), ("README.md", False), ("latest.py", False),
])
def test_steers_tests(path, steers):
    assert grading.steers_tests(path) is steers


# Library source in folders named like tests, in SWE-bench Lite's repositories: the library imports them itself
# (astropy/__init__.py imports astropy/tests/runner.py), so a real fix there is graded with its change applied.
LIBRARY_IN_TEST_FOLDERS = ["django/test/testcases.py", "django/test/utils.py", "sympy/testing/pytest.py",
                           "lib/matplotlib/testing/decorators.py", "astropy/tests/runner.py",
                           "astropy/tests/helper.py", "sphinx/testing/fixtures.py", "xarray/testing.py",
                           "xarray/testing/assertions.py", "pylint/testutils/checker_test_case.py",
                           "sklearn/utils/_testing.py", "pylint/testutils/lint_module_test.py",
                           "pylint/testutils/configuration_test.py", "pylint/testutils/functional/test_file.py",
                           "astroid/test_utils.py"]


@pytest.mark.parametrize("path", LIBRARY_IN_TEST_FOLDERS)
def test_library_code_in_folders_named_like_tests_is_kept(path):
    tests = {"tests/admin_views/tests.py", "astropy/units/tests/test_quantity.py", "sympy/core/tests/test_basic.py"}
    assert not grading.steers_tests(path, tests) and not grading.steers_tests(path)


def test_no_file_of_a_real_honest_fix_is_reset():
    files = {path for fix in real_fixes() for path in fix["files"]}
    assert len(files) > 1000 and sorted(p for p in files if grading.steers_tests(p)) == []


def test_no_library_file_of_a_real_fix_is_reset_by_its_own_tests():
    # each of 3,150 real fix commits with its own test changes as the task's test patch: the rule that reset every
    # file beside a test file reset 35 library files in 12 commits (seaborn/_core.py beside seaborn/conftest.py)
    commits = commit_paths()
    reset = [(c["id"][:10], f) for c in commits for f in c["library"]
             if grading.steers_tests(f, frozenset(c["tests"]), f in c["added"])]
    assert len(commits) == 3150 and sum(bool(c["tests"]) for c in commits) > 1500 and reset == []


def test_the_tasks_test_folders_are_the_tests_own():
    tests = {"tests/admin_views/tests.py", "astropy/units/tests/test_quantity.py", "test_top.py",
             "seaborn/conftest.py", "astropy/tests/test_logger.py"}
    # under a test folder at the repository's top no library code is: all of it is the tests'
    for path in ["tests/admin_views/models.py", "tests/admin_views/__init__.py"]:
        assert grading.steers_tests(path, tests), path
    # inside the library's package, beside a test, library code is as often as not: only a file the diff creates in
    # a test folder is the tests' (a module planted for their imports to find)
    for path in ["astropy/units/tests/helpers.py", "astropy/tests/runner.py", "astropy/tests/command.py"]:
        assert grading.steers_tests(path, tests, new=True) and not grading.steers_tests(path, tests), path
    # beside a test at the repository's top or a conftest.py in the package is the library's own
    for path in ["setup.py", "astropy/units/quantity.py", "tests/other_app/models.py", "seaborn/_core.py"]:
        assert not grading.steers_tests(path, tests) and not grading.steers_tests(path, tests, new=True), path
    diff = "".join(f"--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
                   for p in ["django/test/testcases.py", "tests/admin_views/models.py", "seaborn/_core.py"])
    diff += "--- /dev/null\n+++ b/astropy/tests/planted.py\n@@ -0,0 +1 @@\n+a = 2\n"
    kept, reset = grading.source_only(diff, frozenset(tests))
    assert reset == ["astropy/tests/planted.py", "tests/admin_views/models.py"]
    assert "django/test/testcases.py" in kept and "seaborn/_core.py" in kept


def test_source_only_resets_a_part_by_any_name_it_gives():
    # GNU patch writes the "best" of a part's names (the fewest folders): here conftest.py, whatever +++ says
    swap = "--- a/conftest.py\n+++ b/calc/ops.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    renamed = ("diff --git a/calc/x.py b/conftest.py\nsimilarity index 100%\nrename from calc/x.py\n"
               "rename to conftest.py\n")
    for diff in (swap, renamed):
        assert grading.source_only(diff) == ("", ["conftest.py"])
    # a hunk's removed "-- x" line reads "--- x": no header, and a line separator ends no line
    body = "--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,2 +1,2 @@\n--- a/conftest.py\n+++ b/conftest.py\n"
    assert grading.source_only(body) == (body, [])
    sep = "--- /dev/null\n+++ b/calc/x.py\u2028+++ b/tests/y.py\n@@ -0,0 +1 @@\n+a = 1\n"
    assert grading.source_only(sep) == (sep, [])  # one name, its last folder "x.py\u2028+++ b": the patch refuses it


def test_misread_findings_name_what_the_patch_wrote_that_grading_resets():
    tests = frozenset({"tests/sub/test_x.py"})
    found = grading.misread_findings({"conftest.py": b"", "calc/ops.py": b"", "tests/sub/helper.py": None}, tests)
    assert [f.split(":")[0] for f in found] == ["conftest.py", "tests/sub/helper.py"]
    assert grading.misread_findings({"calc/ops.py": b"", "calc/new.py": None}, tests) == []


def test_source_only_keeps_source_files_of_git_and_plain_diffs():
    kept, reset = grading.source_only(GIT)
    assert reset == ["conftest.py"] and kept == GIT.split("diff --git a/conftest.py")[0]
    kept, reset = grading.source_only(PLAIN)
    assert reset == ["tests/test_mod.py"] and kept == PLAIN.split("--- a/tests/")[0]
    assert grading.source_only(PLAIN, test_paths={"pkg/mod.py"}) == ("", ["pkg/mod.py", "tests/test_mod.py"])
    assert grading.source_only("not a diff") == ("", [])


def test_defined_classes_names_modules_as_python_imports_them(tmp_path):
    def classes(repo, files):
        for rel in files:
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text("class A:\n    class B:\n        pass\n")
        return grading.defined_classes(repo)

    assert classes(tmp_path / "layouts", ["src/marshmallow/schema.py", "lib/matplotlib/axes.py", "calc/ops.py",
                                          "tests/test_ops.py"]) == [
        "calc.ops:A", "calc.ops:A.B", "marshmallow.schema:A", "marshmallow.schema:A.B", "matplotlib.axes:A",
        "matplotlib.axes:A.B"]
    # a lib/ that is a package is imported as lib
    assert classes(tmp_path / "package", ["lib/__init__.py", "lib/util.py"]) == ["lib.util:A", "lib.util:A.B",
                                                                                  "lib:A", "lib:A.B"]


def test_defined_classes_passes_over_a_file_too_deep_to_parse(tmp_path):
    (tmp_path / "calc").mkdir()
    (tmp_path / "calc/ops.py").write_text("class A:\n    pass\n")
    (tmp_path / "calc/table.py").write_text("x = " + " + ".join(["1"] * 100_000) + "\n")
    assert grading.defined_classes(tmp_path) == ["calc.ops:A"]
