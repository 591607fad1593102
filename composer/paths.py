"""Where the repository's folders are, so notebooks and the CLI agree from any working directory."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PARAMS = ROOT / "params"
REPORTS = ROOT / "reports"
# Built artefacts (tiny models, tokenizers, caches) are keyed by content hash; never committed.
CACHE = Path(os.environ.get("COMPOSER_CACHE", ROOT / ".cache"))


def shown(path) -> str:
    """A path as a report shows it: relative to the repository when inside it, so no report carries the absolute
    paths of the machine that made it; a path elsewhere is shown by its last component, and a name that is no path
    here (a Hugging Face model, say) as it is."""
    if not Path(path).is_absolute() and not Path(path).exists():
        return str(path)
    p = Path(path).resolve()
    return p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else f"<outside the repository>/{p.name}"
