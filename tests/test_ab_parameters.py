"""Tests for composer.ab.parameters: 004's parameters as one typed config, equal to the notebook's cell.

    .venv/bin/pytest tests/test_ab_parameters.py
"""

import dataclasses

import pytest

from composer import run
from composer.ab import preparation
from composer.ab.parameters import ABParameters
from composer.paths import NOTEBOOKS, PARAMS

SLUG = "004-ab-train-grpo-vs-trace-replay-dpo"


def test_the_config_is_the_notebooks_parameters_cell():
    """Names in order, defaults, kinds, allowed-values clauses and help: a parameter added to or changed in one and
    not the other fails here."""
    cell = run.notebook_parameters(NOTEBOOKS / f"{SLUG}.ipynb")
    config = {f.name: run.Param(f.default_factory() if f.default is dataclasses.MISSING else f.default,
                                f.type.__name__, f.metadata["allowed"], f.metadata["help"])
              for f in dataclasses.fields(ABParameters)}
    assert list(config) == list(cell)
    for name in cell:
        assert config[name] == cell[name], name


@pytest.mark.parametrize("profile", ["default", *sorted(p.parent.name for p in PARAMS.glob(f"*/{SLUG}.yaml"))])
def test_every_profile_builds_the_config(profile):
    values = run.effective_parameters(SLUG, profile=profile)[0]
    parameters = ABParameters.of({**values, "papermill's own": 1})
    assert {k: getattr(parameters, k) for k in values} == values


@pytest.mark.parametrize("changes, match", [
    ({"seeds": "2"}, r"004 parameter seeds: expects int, got str '2'"),
    ({"seeds": True}, r"004 parameter seeds: expects int, got bool"),
    ({"seeds": 0}, r"004 parameter seeds: must be at least 1, got 0 \(training seeds per arm"),
    ({"learning_rate": 0.0}, r"004 parameter learning_rate: must be more than 0"),
    ({"backend": "online"}, r"004 parameter backend: must be offline \| live, got 'online'"),
    ({"arms": {}}, r"004 parameter arms: must be non-empty"),
    ({"treatment": "C"}, r"004 parameter treatment: 'C' is not one of the arms \['A', 'B', 'control', 'B\+'\]"),
    ({"treatment": "A"}, r"reference and treatment: two different arms, got 'A' twice"),
    ({"env_max_steps": 12}, r"max_tool_calling_iterations \(12\) must be above env_max_steps \(12\)"),
    ({"doses": [{"steps": 2}], "checkpoints": [1]}, r"doses and checkpoints: set one, not both"),
    ({"arms": {"A": {}, "B": {}, "B+": {"start": "teacher"}}, "control": ""}, r"arm 'B\+' has start 'teacher'; one of"),
    ({"arms": {"A": {}, "B": {"start": "planted"}}, "control": "", "positive_control": ""},
     r"004 parameter arms: arm 'B' starts planted, but only the positive control \(''\) may"),
    ({"arms": {"A": {}, "B": {}, "B+": {}, "C": {"start": "planted"}}, "control": ""},
     r"arm 'C' starts planted, but only the positive control \('B\+'\) may"),
    ({"arms": {"A": {}, "B": {}, "B+": {"start": "planted", "trace_replay_weight": 0.5, "pairs": "expert"}},
      "control": ""}, r"arm 'B\+' starts planted and trains on pairs"),
    ({"plant_steps": 0}, r"004 parameter plant_steps: must be at least 1"),
])
def test_a_bad_value_fails_at_construction_naming_the_field(changes, match):
    with pytest.raises(ValueError, match=match):
        ABParameters(**changes)


def test_a_role_may_be_none_and_defaults_are_fresh_copies():
    config = ABParameters(arms={"A": {}, "B": {}}, control="", positive_control="")
    assert (config.reference, config.treatment, config.control) == ("A", "B", "")
    ABParameters().arms["A"]["trace_replay_weight"] = 1.0  # a config's own dict
    assert ABParameters().arms["A"] == {}


def test_the_positive_controls_tasks_are_where_preparation_knows_them():
    clause = next(f.metadata["allowed"] for f in dataclasses.fields(ABParameters) if f.name == "positive_control_tasks")
    assert [c.strip() for c in clause.split("|")] == list(preparation.PLANTED)
