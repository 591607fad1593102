"""Grading's layers in the order grading applies them: the one list both graders loop over.

    from composer.env.defences import layers
    found = layers.scan(before, after, test_paths)  # {"flagged": [...], "review": [...]}, every scan layer's
    report["layers"] = {layer.name: "on", ...}       # each grader says, for every layer of LAYERS, whether it ran

Both graders, the embedded one (composer.env.real.swebench) and a real instance's (composer.env.real.container),
read the changed files to at most SCAN_LIMIT + 1 bytes and run every "scan" layer through `scan`, before any test
runs (a decisive finding scores 0, unrun), and report each layer of LAYERS by name: "on", or "off" / "none" with
why, so a layer one grader or one containment mode does not run shows in its report instead of passing unseen.
A new defence is a module in this folder, an entry in LAYERS and a row in README.md's table of layers;
tests/test_env_layers.py holds the three together and checks that both graders report every layer.
"""
from dataclasses import dataclass
from typing import Callable

from composer.env.defences import grading, tampering

SCAN_LIMIT = 8 << 20  # bytes of a changed file the scan reads; a longer one scores 0 (`too_large`)


def too_large(before: dict, after: dict, test_paths: frozenset) -> dict[str, list[str]]:
    """Decisive findings for changed files longer than the scan reads: the rest would run unscanned (the agent's
    tools cap a file far below; a prediction from elsewhere has no cap)."""
    return {"flagged": [f"a file too large to scan in {p}" for p, text in after.items()
                        if text and len(text) > SCAN_LIMIT], "review": []}


def _syntax(before: dict, after: dict, test_paths: frozenset) -> dict[str, list[str]]:
    return tampering.report(before, after)


def _misread(before: dict, after: dict, test_paths: frozenset) -> dict[str, list[str]]:
    return {"flagged": grading.misread_findings(before, test_paths), "review": []}


@dataclass(frozen=True)
class Layer:
    name: str  # its key in a grading report's "layers" and its row in README.md's table of layers
    stage: str  # "diff": what of the diff is graded; "scan": the changed files, before anything runs;
    #             "plant": written into the graded test files; "run": how the tests run; "read": their outcomes read
    module: str  # where it lives
    # "scan" layers: (before, after, test_paths) -> {"flagged": decisive findings, "review": the rest}; `before` and
    # `after` map each changed path to its bytes (None: absent), read to SCAN_LIMIT + 1 bytes at most
    check: Callable[[dict, dict, frozenset], dict[str, list[str]]] | None = None


LAYERS = (
    Layer("reset", "diff", "composer.env.defences.grading"),
    Layer("syntax", "scan", "composer.env.defences.tampering", _syntax),
    Layer("misread", "scan", "composer.env.defences.grading", _misread),
    Layer("size", "scan", "composer.env.defences.layers", too_large),
    Layer("canaries", "plant", "composer.env.defences.canaries"),
    Layer("probes", "plant", "composer.env.defences.probes, composer.env.defences.real_probes"),
    Layer("plain_values", "run", "composer.env.containment.plain_values"),
    Layer("read_only", "run", "composer.env.containment.sandbox, composer.env.real.container"),
)
NAMES = tuple(layer.name for layer in LAYERS)


def scan(before: dict, after: dict, test_paths) -> dict[str, list[str]]:
    """Every "scan" layer's findings on the changed files, in LAYERS' order: {"flagged": the decisive ones (the
    submission scores 0 and, where grading flags tampering, is not run), "review": the rest}."""
    found = {"flagged": [], "review": []}
    for layer in LAYERS:
        if layer.check is not None:
            for kind, items in layer.check(before, after, frozenset(test_paths)).items():
                found[kind] += items
    return found


def statuses(**given: str) -> dict[str, str]:
    """A grading report's "layers": every layer "on" but those given otherwise ("off", or "off: why", "none: why").
    A name that is no layer's is a bug in the grader, not a status."""
    if unknown := sorted(set(given) - set(NAMES)):
        raise ValueError(f"no grading layer is named {unknown}; the layers are {list(NAMES)}")
    return {name: given.get(name, "on") for name in NAMES}
