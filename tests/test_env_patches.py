"""Tests for composer.env.containment.patches: paths stay inside the copy, diffs apply whole or not at all."""

import os

import pytest

from composer.env.containment import patches, sandbox


@pytest.fixture
def repo(tmp_path):
    d = tmp_path / "repo"
    d.mkdir()
    return d


def test_safe_path(repo, tmp_path):
    (repo / "pkg").mkdir()
    (repo / "escape").symlink_to("/etc")
    (repo / "passwd").symlink_to("/etc/passwd")
    assert patches.safe_path(repo, "pkg/a.py") == (repo / "pkg" / "a.py").resolve()
    assert patches.safe_path(repo, "pkg/../b.py") == (repo / "b.py").resolve()
    for bad in ["../x", "pkg/../../x", "/etc/passwd", "escape/passwd", "passwd", "~/x", "a\0b"]:
        with pytest.raises(patches.SandboxError):
            patches.safe_path(repo, bad)


GOOD = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
diff --git a/tests/test_calc.py b/tests/test_calc.py
new file mode 100644
--- /dev/null
+++ b/tests/test_calc.py
@@ -0,0 +1,2 @@
+def test_add():
+    assert __import__("calc").add(1, 2) == 3
"""


@pytest.fixture(params=["patch", "git"])
def tool(request, monkeypatch):
    if request.param == "git" and not __import__("shutil").which("git"):
        pytest.skip("git not installed")
    monkeypatch.setattr(patches, "_patch_tool", lambda: request.param)
    return request.param


def test_apply_unified_diff_applies_a_good_diff(repo, tool):
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    assert patches.apply_unified_diff(repo, GOOD) == ["calc.py", "tests/test_calc.py"]
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert sandbox.run_pytest(repo, ["tests/test_calc.py::test_add"]).outcomes == {"tests/test_calc.py::test_add": True}


def test_apply_unified_diff_rejects_bad_diffs_and_changes_nothing(repo, tool):
    original = "def add(a, b):\n    return a * b\n"  # the first hunk does not match
    (repo / "calc.py").write_text(original)
    with pytest.raises(patches.PatchError, match="failed"):
        patches.apply_unified_diff(repo, GOOD)
    assert (repo / "calc.py").read_text() == original and not (repo / "tests").exists()
    with pytest.raises(patches.PatchError):
        patches.apply_unified_diff(repo, "this is not a diff\n")
    with pytest.raises(patches.PatchError):
        patches.apply_unified_diff(repo, "")


@pytest.mark.parametrize("target", ["../outside.txt", "/tmp/composer-outside.txt", "link/outside.txt"])
def test_apply_unified_diff_refuses_paths_outside_the_repo(repo, tmp_path, target):
    (repo / "link").symlink_to(tmp_path)
    diff = f"--- /dev/null\n+++ b/{target}\n@@ -0,0 +1 @@\n+pwned\n"
    with pytest.raises(patches.PatchError, match="escapes|absolute"):
        patches.apply_unified_diff(repo, diff)
    assert not (tmp_path / "outside.txt").exists() and not os.path.exists("/tmp/composer-outside.txt")


# GNU patch ends a name at a space where no tab follows, and a line separator ends a line for Python's splitlines but
# not for patch: grading read "conftest.py x" (kept, not scanned) while patch wrote conftest.py.
ODD_NAMES = ["conftest.py x", "tests/conftest.py x", "pytest.ini x", "calc/x\u2028.py", "calc/x\x85.py",
             "tests/x\u2029.py", "calc/x\x0c.py", "calc/a b.py"]


@pytest.mark.parametrize("name", ODD_NAMES)
def test_apply_unified_diff_refuses_names_patch_reads_otherwise(repo, tool, name):
    diff = f"--- /dev/null\n+++ b/{name}\n@@ -0,0 +1 @@\n+import pytest\n"
    assert patches.diff_paths(diff) == [name]  # one whole name, as patch reads the line
    with pytest.raises(patches.PatchError, match="plain name"):
        patches.apply_unified_diff(repo, diff)
    assert list(repo.rglob("*")) == []


def test_apply_unified_diff_returns_what_it_wrote_on_disk(repo, tool, monkeypatch):
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    assert patches.apply_unified_diff(repo, GOOD.replace("+++ b/calc.py", "+++ b/calc.py\t2024-01-01")) == [
        "calc.py", "tests/test_calc.py"]
    # a parser of headers that reads a name otherwise than the patch tool: the file written is refused and removed
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "tests/test_calc.py").unlink()
    monkeypatch.setattr(patches, "diff_paths", lambda diff: ["calc.py", "tests/other.py"])
    with pytest.raises(patches.PatchError, match="no header of the diff names"):
        patches.apply_unified_diff(repo, GOOD)
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert not (repo / "tests/test_calc.py").exists()


def test_diff_paths_skips_hunk_bodies_and_reads_every_header():
    body = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n--- a/conftest.py\n+++ b/conftest.py\n"
    assert patches.diff_paths(body) == ["calc.py"]
    assert patches.diff_paths("Index: a/conftest.py\ndiff --git a/x.py b/y.py\nrename from x.py\nrename to z.py\n") \
        == ["conftest.py", "x.py", "y.py", "z.py"]
