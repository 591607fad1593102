"""Tests for composer.ab.planting: the planted checkpoint a positive control starts from.

    .venv/bin/pytest tests/test_ab_planting.py
"""

import json
from pathlib import Path

import pytest

from composer.ab import planting
from composer.env.embedded import tasks
from composer.policies import ENV_CONFIG


@pytest.fixture(scope="module")
def records():
    return tasks.generate(2, seed=0, split="test")


def test_planting_fits_the_demonstrations_and_is_built_once(tiny, records, tmp_path):
    made = planting.plant(tiny, records, ENV_CONFIG, steps=3, learning_rate=1e-2, run_dir=tmp_path)
    assert (made["steps"], made["tasks"], len(made["nll"])) == (3, 2, 4)  # before each step and after the last
    assert made["nll"][-1] < made["nll"][0]  # the expert's actions grew likelier
    weights = Path(made["path"]) / "model.safetensors"
    assert weights.is_file() and Path(made["path"]).parent.parent == tmp_path / "inputs"
    stamp = weights.stat().st_mtime_ns
    assert planting.plant(tiny, records, ENV_CONFIG, steps=3, learning_rate=1e-2, run_dir=tmp_path) == made
    assert weights.stat().st_mtime_ns == stamp  # read back, not trained again
    other = planting.plant(tiny, records, ENV_CONFIG, steps=1, learning_rate=1e-2, run_dir=tmp_path)
    assert other["path"] != made["path"] and len(other["nll"]) == 2
    assert json.loads((Path(other["path"]).parent / "meta.json").read_text())["step"] == planting.STEP


@pytest.mark.parametrize("steps, learning_rate", [(0, 1e-3), (2, 0.0)])
def test_a_plant_that_would_not_move_is_refused(tiny, records, tmp_path, steps, learning_rate):
    with pytest.raises(ValueError, match="steps >= 1 and a learning rate > 0"):
        planting.plant(tiny, records, ENV_CONFIG, steps=steps, learning_rate=learning_rate, run_dir=tmp_path)
