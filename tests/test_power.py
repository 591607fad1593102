"""composer.power: what a live A/B design can detect and what it costs, by hand and by simulation."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import yaml

from composer import ab, plan, power, stats
from composer.paths import ROOT

LIVE = yaml.safe_load((ROOT / "params/live/004-ab-train-grpo-vs-trace-replay-dpo.yaml").read_text())


def test_mde_by_hand():
    a = power.Assumptions(discordance=0.2, task_sd=0.1, seed_sd=0.02)
    seeds, tasks, samples = 3, 50, 2
    seed_ms, task_ms = 0.1 + tasks * 0.02 ** 2, 0.1 + seeds * 0.1 ** 2  # residual 0.2 / 2 samples
    se = math.sqrt((seed_ms + task_ms) / (seeds * tasks))
    df = (seed_ms + task_ms) ** 2 / (seed_ms ** 2 / 2 + task_ms ** 2 / 49)
    assert power.mde(seeds, tasks, samples, a) == pytest.approx(stats.t_detectable_effect(se, df))
    # more of anything never hurts; the task term is a floor that seeds and samples cannot cross
    assert power.mde(6, tasks, samples, a) < power.mde(3, tasks, samples, a)
    assert power.mde(3, tasks, 8, a) < power.mde(3, tasks, 2, a)
    assert power.floor(tasks, a) < power.mde(1000, tasks, 1000, a) < power.floor(tasks, a) * 1.05
    with pytest.raises(ValueError, match="2 seeds"):
        power.mde(1, 50, 1)


def test_the_planned_mde_is_what_004s_analysis_detects_80_percent_of_the_time():
    """Cells drawn from the planning model (seed, task and sampling terms as power.components gives them), analysed
    by ab.difference as 004 does: at a true B - A of power.mde, the interval is above 0 in about 80 % of 600
    experiments (75-88 %: the planning variance is the conservative one the interval uses)."""
    a = power.Assumptions(discordance=0.22, task_sd=0.1, seed_sd=0.02)
    seeds, tasks, samples = 4, 60, 2
    effect = power.mde(seeds, tasks, samples, a)
    rng = np.random.default_rng(0)
    c = power.components(seeds, tasks, samples, a)

    def experiment():
        diff = (effect + rng.normal(0, math.sqrt(c["seed"]), (seeds, 1)) + rng.normal(0, math.sqrt(c["task"]), (1, tasks))
                + rng.normal(0, math.sqrt(c["residual"]), (seeds, tasks)))
        return ab.difference(np.zeros_like(diff), diff)["diff"].low > 0

    detected = np.mean([experiment() for _ in range(600)])
    assert 0.75 <= detected <= 0.88, detected


def test_cost_by_hand():
    setup = plan.Setup("full", "server", 0, 8, dpo_pairs=1)
    got = power.cost(LIVE, setup, seeds=3, tasks=100, samples=2, assumptions=power.Assumptions(usd_per_gpu_hour=2.0))
    w = plan.workload(LIVE)
    model = plan.MODELS[w["model"]]
    train = plan.gpu_hours(model, setup, steps=w["steps"], rollouts_per_step=w["rollouts_per_step"],
                           tokens_per_rollout=w["tokens_per_rollout"])["gpu_hours"] * 4 * 3
    episodes = (4 * 3 + 1) * 100 * 2  # every arm and seed, and the initial checkpoint
    evaluate = (episodes * w["tokens_per_rollout"] / (model.gen_tokens_per_s * 8)
                + math.ceil(episodes / plan.GRADERS) * plan.GRADING_S) / 3600 * 8
    assert got == pytest.approx({"train_gpu_hours": train, "eval_gpu_hours": evaluate, "gpu_hours": train + evaluate,
                                 "usd": 2.0 * (train + evaluate)})


def test_wall_time_on_n_nodes_by_hand():
    """12 trainings (4 arms x 3 seeds) of one training run's hours each, then 13 evaluations, in waves of N."""
    setup = power.fitting_setups(LIVE)[0]
    w = plan.workload(LIVE)
    one = plan.gpu_hours(plan.MODELS[w["model"]], setup, steps=w["steps"], rollouts_per_step=w["rollouts_per_step"],
                         tokens_per_rollout=w["tokens_per_rollout"])["hours"]
    evaluation = power.cost(LIVE, setup, 3, 103, 4)["eval_gpu_hours"] / 13 / setup.gpus
    assert power.wall_hours(LIVE, 1) == pytest.approx(12 * one + 13 * evaluation)
    assert power.wall_hours(LIVE, 5) == pytest.approx(3 * one + 3 * evaluation)
    assert power.wall_hours(LIVE, 12) == pytest.approx(one + 2 * evaluation)
    assert power.wall_hours(LIVE, 13) == pytest.approx(one + evaluation)


def test_the_live_design_and_the_search():
    own = power.design(LIVE)
    assert (own["seeds"], own["tasks"], own["samples"], own["pool"]) == (3, 103, 4, "lite:test")
    assert (own["mode"], own["vllm"], own["gpus"]) == ("full", "server", 8)  # the YAML's own setup
    assert own["mde"] > 0.02  # the issue this module answers: 3 x 103 x 4 cannot see 2 points
    assert power.best(own["usd"] / 10, LIVE) is None  # nothing this cheap exists
    small, big = power.best(own["usd"], LIVE), power.best(10 * own["usd"], LIVE, effect=0.02)
    assert small["usd"] <= own["usd"] and small["mde"] <= own["mde"]  # the profile's design is in the grid
    assert big["mde"] <= small["mde"] and big["usd"] <= 10 * own["usd"]
    cheapest = big["cheapest_for_effect"]
    assert cheapest["mde"] <= 0.02 and cheapest["pool"] == "swe-bench:test"  # Lite's 300 tasks cannot
    assert power.floor(300) > 0.02 and power.floor(103) > 0.02
    with pytest.raises(ValueError, match="budget_usd"):
        power.best(0, LIVE)


def test_plan_budget_cli_prints_the_design_and_json_last():
    done = subprocess.run([sys.executable, "-m", "composer", "plan", "--budget-usd", "30000", "--task-sd", "0.1"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["budget_usd"] == 30000 and result["assumptions"]["task_sd"] == 0.1
    assert result["best"]["usd"] <= 30000 and "best within $30,000" in done.stdout
    assert result["best"] == power.best(30000, LIVE, power.Assumptions(task_sd=0.1), effect=0.02)
    bad = subprocess.run([sys.executable, "-m", "composer", "plan", "--budget-usd", "0"], capture_output=True,
                         text=True, cwd=ROOT)
    assert bad.returncode == 2 and "--budget-usd must be > 0" in bad.stderr
