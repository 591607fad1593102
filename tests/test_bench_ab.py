"""composer.bench.ab: one seed of every arm trained in fresh spawned processes, through the CLI.

    .venv/bin/pytest -q tests/test_bench_ab.py

Runs at the notebook's default (smoke) scale. Timings are not asserted against the target (a benchmark, not a
timed test): only that each arm was measured in its own process and that the ratio is B's time over A's. The real
run (two trainings, each in a fresh spawned process) is the slow tier's (`make test-slow`); the fast tier runs the
benchmark's own code with the plan's jobs answered by figures of the test's.
"""

import json
import os
import subprocess
import sys

from pathlib import Path

import pytest

from composer.costs import phases
from composer.paths import ROOT


def test_the_measure_plans_one_seed_of_a_and_b_trained_alone_and_reports_their_ratio(monkeypatch, capsys):
    from composer.bench import ab

    figures = {"A": {"wall_s": 10.0, "peak_rss_bytes": 1000 * 2**20},
               "B": {"wall_s": 16.0, "peak_rss_bytes": 1100 * 2**20}}
    calls = []

    def jobs(plan, run_dir, *, workers, train_only, progress):  # arms.run's answer, one job per arm
        calls.append((sorted(plan.arms), plan.seeds, workers, train_only))
        for arm in plan.arms:  # each training's phase file: two steps
            folder = Path(run_dir) / "jobs" / f"train-{arm}"
            folder.mkdir(parents=True)
            (folder / phases.FILE).write_text("".join(json.dumps(
                {"schema": phases.SCHEMA, "step": step, **dict.fromkeys(phases.PHASES, 1.25 * step),
                 "trained_tokens": 100 * step}) + "\n"
                for step in (1, 2)))
        return {(arm, 0): {"train": figures[arm], "keys": (f"train-{arm}",)} for arm in plan.arms}

    monkeypatch.setattr(ab.training, "run", jobs)
    assert ab.main(["--profile", "default"]) == 0
    out = capsys.readouterr()
    result = json.loads(out.out.strip().splitlines()[-1])
    assert calls == [(["A", "B"], 1, 1, True)]  # one seed of each, one job at a time (each its own process), no eval
    assert result["arms"] == {arm: {**f, "phases_s": dict.fromkeys(phases.PHASES, 3.75)} for arm, f in figures.items()}
    assert (result["reference"], result["treatment"]) == ("A", "B")
    assert (result["b_over_a_time"], result["b_over_a_mem"]) == (1.6, 1.1)
    assert result["meets_targets"] == {"b_over_a_time": False, "b_over_a_mem": True} and result["profile"] == "default"
    assert result["pairs"]["pairs"] > 0
    assert "A: 10.0 s (generate 3.8, tools 3.8, reset 3.8, train 3.8), peak RSS 1000 MiB" in out.err
    # B's two steps, each with its step's pairs: their tokens priced at A's 3.75 s of training over 300 tokens
    assert result["pair_tokens_trained"] > 0
    assert result["work_floor_time"] == pytest.approx(1 + 3.75 / 300 * result["pair_tokens_trained"] / 10, abs=2e-3)
    assert f"its pairs' work floor {result['work_floor_time']}x" in out.err


def test_the_work_floor_prices_pair_tokens_at_the_references_cost_per_trained_token(tmp_path):
    from datasets import Dataset

    from composer.disagreement import pairs
    from composer.bench import ab
    from composer.models import build_tokenizer, tiny_model
    from composer.trainer import encode_pairs

    steps = [{"train_s": 2.0, "trained_tokens": 100}, {"train_s": 2.0, "trained_tokens": 100}]
    assert ab.work_floor_time(10.0, steps, 500) == 2.0  # 500 tokens at 0.02 s each: 10 s more than A's 10 s
    assert ab.work_floor_time(10.0, steps, 0) == 1.0
    rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": "Fix add(a, b)."}]] * 2,
                              "chosen": ["return a + b", "pytest"], "rejected": ["submit", "x"],
                              "ref_chosen_logps": [0.0, 0.0], "ref_rejected_logps": [0.0, 0.0]})
    pairs.save(rows, tmp_path / "pairs")
    encoded = encode_pairs(build_tokenizer(), rows)  # the prompt once, and both completions
    assert ab.tokens_per_pair(tmp_path / "pairs", tiny_model()) == sum(
        len(e["prompt"]) + len(e["chosen"]) + len(e["rejected"]) for e in encoded) / 2
    assert len(encoded[0]["prompt"]) > 10 and len(encoded[0]["chosen"]) > 0


@pytest.mark.slow
def test_the_cli_prints_each_arms_time_and_memory_and_the_ratio_last():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "composer", "bench", "ab", "--profile", "default"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result["arms"]) == {"A", "B"} and result["profile"] == "default"
    assert result["cpus"] >= 1 and result["load_average_1m_at_start"] >= 0 and result["machine"]
    for figures in result["arms"].values():
        assert figures["wall_s"] > 0 and figures["peak_rss_bytes"] > 100 * 2**20
        assert figures["phases_s"]["train_s"] > 0 and sum(figures["phases_s"].values()) <= figures["wall_s"]
    a, b = result["arms"]["A"], result["arms"]["B"]
    assert result["b_over_a_time"] == round(b["wall_s"] / a["wall_s"], 3)
    assert result["b_over_a_mem"] == round(b["peak_rss_bytes"] / a["peak_rss_bytes"], 3)
    assert result["meets_targets"] == {k: result[k] <= bound for k, bound in result["targets"].items()}
    assert result["work_floor_time"] > 1 and result["pair_tokens_trained"] > 0
    assert "evaluation excluded" in result["scope"] and result["pairs"]["pairs"] > 0 and "shuffled" not in result["pairs"]
