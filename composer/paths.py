"""Where the repository's folders are, so notebooks and the CLI agree from any working directory."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PARAMS = ROOT / "params"
REPORTS = ROOT / "reports"
# Built artefacts (tiny models, tokenizers, caches) are keyed by content hash; never committed.
CACHE = Path(os.environ.get("COMPOSER_CACHE", ROOT / ".cache"))
