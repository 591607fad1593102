"""Build commit-paths.json.xz: the paths each real fix commit changed, its library files and its test files.

    python data/real-fixes/commit_paths.py MIRRORS   # MIRRORS/<owner>+<name>/repo: clones at README's HEADs

For every kind "commit" fix of this folder, and for the next OLDER commits of each repository by the same rule
(README.md, "How it was made"), the paths only: "library" (the files the README's rule keeps), "added" (those of them
the commit created) and "tests" (the other changed files that SWE-bench's collection would put in a task's
test_patch: a path containing "test" or "e2e", as swebench.collect.utils.extract_patches splits a fix). Grading's
reset rule is measured on them (tests/test_env_grading.py): with a commit's own test changes as the task's test
patch, none of its library files may be reset.
"""

import json
import lzma
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

HERE = Path(__file__).resolve().parent
OLDER = 200  # commits per repository beyond the 150 of the fixture
ROOTS = {"astropy/astropy": ("astropy/",), "mwaskom/seaborn": ("seaborn/",),
         "pallets/flask": ("src/flask/", "flask/"), "psf/requests": ("src/requests/", "requests/"),
         "pydata/xarray": ("xarray/",), "pylint-dev/pylint": ("pylint/",),
         "pytest-dev/pytest": ("src/_pytest/", "src/pytest/", "_pytest/"), "sphinx-doc/sphinx": ("sphinx/",),
         "sympy/sympy": ("sympy/",)}
HELPERS = ("astropy/tests/", "sympy/testing/", "sphinx/testing/", "xarray/testing/", "pylint/testutils/",
           "flask/testing.py", "src/flask/testing.py")  # library helpers for testing, kept (README)
FIX = re.compile(r"\b(fix|bug|regress|crash|error)", re.IGNORECASE)


def kept(repo: str, path: str) -> bool:
    """The README's rule: a .py file under the library's root that is not a test (its helpers for testing are)."""
    p = PurePosixPath(path)
    if p.suffix != ".py" or not path.startswith(ROOTS[repo]):
        return False
    in_tests = not {"tests", "test"}.isdisjoint(p.parts[:-1])
    if path.startswith(HELPERS):
        return not in_tests or path.startswith("astropy/tests/") and "tests" not in p.parts[2:-1]
    return not (in_tests or p.name.startswith("test_") or p.name.endswith("_test.py") or p.name == "conftest.py")


def git(clone: Path, *args) -> str:
    return subprocess.run(["git", "-C", str(clone), *args], capture_output=True, check=True,
                          encoding="utf-8", errors="replace").stdout


def paths(repo: str, clone: Path, sha: str) -> dict:
    status = dict(reversed(x.split("\t", 1)) for x in
                  git(clone, "show", "--no-renames", "--name-status", "--format=", sha).splitlines() if x)
    library = sorted(p for p in status if kept(repo, p))
    tests = sorted(p for p in status if p not in library and ("test" in p or "e2e" in p))
    return {"library": library, "added": [p for p in library if status[p] == "A"], "tests": tests}


def older(repo: str, clone: Path, oldest: str) -> list[dict]:
    """The next OLDER commits after `oldest` (the fixture's last) by the README's rule."""
    log = git(clone, "log", "--no-merges", "--format=%H%x00%cI%x00%an%x00%B%x01", f"{oldest}^")
    found = []
    for entry in log.split("\x01"):
        if len(found) == OLDER or not entry.strip():
            continue
        sha, date, author, body = entry.strip("\n").split("\x00", 3)
        if not FIX.search(body) or "[bot]" in author or "pre-commit-ci" in author:
            continue
        commit = {"repo": repo, "id": sha, "date": date, "older": True, **paths(repo, clone, sha)}
        if commit["library"]:
            found.append(commit)
    return found


def main(mirrors: Path) -> None:
    fixes = [fix for f in sorted(HERE.glob("*__*.json.xz")) for fix in json.loads(lzma.decompress(f.read_bytes()))]
    commits, last = [], {}
    for fix in (f for f in fixes if f["kind"] == "commit"):
        clone = mirrors / fix["repo"].replace("/", "+") / "repo"
        found = paths(fix["repo"], clone, fix["id"])  # the fixture's own library files (it skips large ones)
        commits.append({"repo": fix["repo"], "id": fix["id"], "date": fix["date"], "older": False, **found,
                        "library": sorted(fix["files"]), "added": [p for p in found["added"] if p in fix["files"]]})
        last[fix["repo"]] = fix["id"]  # each file lists its commits newest first
    for repo, oldest in last.items():
        commits += older(repo, mirrors / repo.replace("/", "+") / "repo", oldest)
    data = json.dumps(commits, separators=(",", ":")).encode()
    (HERE / "commit-paths.json.xz").write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
