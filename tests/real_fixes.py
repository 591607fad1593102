"""Real honest fixes of SWE-bench Lite's repositories (data/real-fixes/README.md: provenance and licences): the
whole changed library files before and after bug-fix commits, patch releases and patches a SWE-bench harness
resolved (shared by the tests of the scan and of what grading keeps)."""

import json
import lzma
from pathlib import Path

FILES = sorted((Path(__file__).resolve().parents[1] / "data/real-fixes").glob("*.json.xz"))


def real_fixes():
    for path in FILES:
        yield from json.loads(lzma.decompress(path.read_bytes()))
