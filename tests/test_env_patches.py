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
