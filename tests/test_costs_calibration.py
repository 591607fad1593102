"""composer.costs.calibration: the cost model at published runs' own layouts, and what it cannot check."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from composer.costs import calibration, compute
from composer.paths import ROOT

BY_RUN = {r.run.split(" ")[0]: r for r in calibration.RUNS}


def test_every_published_layout_fits_and_needs_what_it_used():
    """Each run's own layout passes the memory check, and the knobs it set were needed: DeepSWE's 32B does not fit
    64 H100s without sequence parallelism (its offload was not: 64 shards of its state fit), SkyRL's 7B not 8 H100s
    without its memory saver."""
    for r in calibration.RUNS:
        assert compute.memory_gb(r.model, r.setup, seq_tokens=r.context)["fits"], r.run
    deepswe, seven = BY_RUN["DeepSWE-Preview"], BY_RUN["SkyRL-Agent-7B-v0"]
    assert not compute.memory_gb(deepswe.model, replace(deepswe.setup, sp=1), seq_tokens=deepswe.context)["fits"]
    assert compute.memory_gb(deepswe.model, replace(deepswe.setup, offload=False), seq_tokens=deepswe.context)["fits"]
    assert not compute.memory_gb(seven.model, replace(seven.setup, sleep=False), seq_tokens=seven.context)["fits"]


def test_a_row_by_hand():
    r = BY_RUN["DeepSWE-Preview"]
    tokens = min(compute.FILL * 36_864, compute.PROMPT_TOKENS + compute.FILL * 50 * compute.TURN_TOKENS)
    step = compute.gpu_hours(r.model, r.setup, steps=1, rollouts_per_step=512, tokens_per_rollout=tokens,
                             turns=(tokens - compute.PROMPT_TOKENS) / compute.TURN_TOKENS, graders=512)
    row = calibration.row(r)
    assert row["ratio"] == pytest.approx(200 * step["gpu_hours"] / 9216) and row["published_gpu_hours"] == 9216
    skyrl = calibration.row(BY_RUN["SkyRL-Agent-8B-v0"])
    assert skyrl["implied_steps"] == pytest.approx(216 / skyrl["plan_gpu_hours_per_step"])
    assert skyrl["implied_epochs"] == pytest.approx(skyrl["implied_steps"] / 9) and "ratio" not in skyrl


def test_skyrls_gpu_hours_buy_a_number_of_steps_its_scripts_allow():
    """SkyRL-v0's steps are not published (its scripts cap training at 100 epochs and the runs stopped on wall
    time): the plan's step time must make its GPU-hours at least one epoch and at most the cap."""
    for r in calibration.rows():
        if "implied_epochs" in r:
            assert 1 <= r["implied_epochs"] <= 100, r


@pytest.mark.xfail(strict=True, reason="the calibration is not met: at DeepSWE's own layout and its 512 "
                   "sandboxes at once the plan gives ~0.33x its 9,216 GPU-hours (~840 s a step against the 2,592 s its "
                   "6 days make), and no run publishes its time by phase to say which component is short")
def test_deepswe_within_one_and_a_half_times_at_its_own_layout():
    row = calibration.row(BY_RUN["DeepSWE-Preview"])
    assert 1 / 1.5 <= row["ratio"] <= 1.5


def test_the_command_prints_the_table_and_json_last_and_docs_carry_it():
    done = subprocess.run([sys.executable, "-m", "composer", "plan", "--published"], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == json.loads(json.dumps(calibration.rows()))
    assert lines[:-1] == calibration.table()
    assert "\n".join(calibration.table()) in (ROOT / "docs/live.md").read_text(), \
        "docs/live.md: paste the table of python -m composer plan --published"
