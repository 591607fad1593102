"""Tests for composer.env.defences.layers: one list of grading layers, its table, and the scan layers' one loop."""

import importlib
import re
from pathlib import Path

import pytest

from composer.env.defences import layers

README = Path(layers.__file__).with_name("README.md")


def table() -> list[list[str]]:
    """The rows of README.md's table of layers, each cell stripped."""
    text = README.read_text().split("## The layers, in order", 1)[1]
    rows = text[text.index("\n| "):].strip().split("\n\n", 1)[0].splitlines()  # the first table only
    header, *body = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]
    assert header == ["layer", "stage", "module", "what it decides"]
    return body[1:]  # after the |---| line


def test_the_readme_table_is_the_list_in_order():
    assert [(r[0], r[1], r[2]) for r in table()] == [(x.name, x.stage, x.module) for x in layers.LAYERS]


def test_every_layer_names_a_module_that_exists_and_a_stage_grading_has():
    for layer in layers.LAYERS:
        for name in layer.module.split(", "):
            importlib.import_module(name)
        assert layer.stage in ("diff", "scan", "plant", "run"), layer
        assert (layer.check is not None) == (layer.stage == "scan"), layer


def test_statuses_name_every_layer_and_refuse_a_name_that_is_no_layers():
    assert layers.statuses() == {name: "on" for name in layers.NAMES}
    assert layers.statuses(probes="none: why")["probes"] == "none: why"
    with pytest.raises(ValueError, match=re.escape("no grading layer is named ['probe']")):
        layers.statuses(probe="off")


def test_each_scan_layer_finds_on_its_own_and_scan_runs_them_all(monkeypatch):
    """One changed file per scan layer, each caught by that layer alone: a file longer than the scan reads, a
    tracing hook, and a conftest.py the patch tool wrote under a name that grading read otherwise."""
    monkeypatch.setattr(layers, "SCAN_LIMIT", 100)
    before = {"big.py": None, "hook.py": b"x = 1\n", "conftest.py": None}
    after = {"big.py": b"X = '" + b"x" * 200 + b"'\n", "hook.py": b"import sys\nsys.settrace(None)\n",
             "conftest.py": b"import pytest\n"}
    found = layers.scan(before, after, ())
    for layer in layers.LAYERS:
        if layer.check is None:
            continue
        own = layer.check(before, after, frozenset())
        assert own["flagged"], f"{layer.name} found nothing on its own"
        assert set(own["flagged"]) <= set(found["flagged"]) and set(own["review"]) <= set(found["review"])
    assert any("too large to scan in big.py" in f for f in found["flagged"])
    assert "tracing hooks in hook.py:2" in found["flagged"]
    assert any(f.startswith("conftest.py: the patch wrote it") for f in found["flagged"])
    assert layers.scan({"ok.py": b"x = 1\n"}, {"ok.py": b"x = 2\n"}, ()) == {"flagged": [], "review": []}
