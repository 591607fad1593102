"""Real honest fixes of SWE-bench Lite's repositories (data/real-fixes/README.md: provenance and licences): the
whole changed library files before and after bug-fix commits, patch releases and patches a SWE-bench harness
resolved (shared by the tests of the scan and of what grading keeps)."""

import json
import lzma
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "data/real-fixes"
FILES = sorted(HERE.glob("*__*.json.xz"))  # one a repository


def real_fixes():
    for path in FILES:
        yield from json.loads(lzma.decompress(path.read_bytes()))


def commit_paths():
    """Each real fix commit's changed paths (data/real-fixes/commit_paths.py): its library files ("library", those it
    created in "added") and its test changes ("tests"), for the 1,350 commits above and 1,800 older ones."""
    return json.loads(lzma.decompress((HERE / "commit-paths.json.xz").read_bytes()))
