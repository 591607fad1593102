"""composer.env.grading: what of an agent's diff grading takes."""

import pytest

from composer.env import grading

GIT = ("diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -3,2 +3,3 @@\n x = 1\n"
       "+import ctypes\n y = 2\n"
       "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
       "@@ -0,0 +1 @@\n+import pytest\n")
PLAIN = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n--- a/tests/test_mod.py\n+++ b/tests/test_mod.py\n" \
        "@@ -1 +1 @@\n-assert 0\n+assert 1\n"


@pytest.mark.parametrize("path, steers", [
    ("conftest.py", True), ("pkg/sub/conftest.py", True), ("pytest.ini", True), ("tox.ini", True),
    ("setup.cfg", True), ("pyproject.toml", True), ("x.pth", True), ("sitecustomize.py", True),
    ("tests/helpers.py", True), ("pkg/testing/util.py", True), ("test_ops.py", True), ("ops_test.py", True),
    ("calc/__pycache__/ops.cpython-311.pyc", True), ("calc/ops.pyc", True), ("calc/__pycache__/x.txt", True),
    ("calc/ops.py", False), ("calc/contest.py", False), ("README.md", False), ("latest.py", False),
])
def test_steers_tests(path, steers):
    assert grading.steers_tests(path) is steers


def test_source_only_keeps_source_files_of_git_and_plain_diffs():
    kept, reset = grading.source_only(GIT)
    assert reset == ["conftest.py"] and kept == GIT.split("diff --git a/conftest.py")[0]
    kept, reset = grading.source_only(PLAIN)
    assert reset == ["tests/test_mod.py"] and kept == PLAIN.split("--- a/tests/")[0]
    assert grading.source_only(PLAIN, test_paths={"pkg/mod.py"}) == ("", ["pkg/mod.py", "tests/test_mod.py"])
    assert grading.source_only("not a diff") == ("", [])
