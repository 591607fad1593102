"""composer.bench.env at a tiny size through the CLI: the JSON last line, its keys, and the reward check.

    .venv/bin/pytest tests/test_bench_env.py

Throughput is not asserted against the 20 steps/s target (a benchmark, not a timed test on a shared
machine): only that every figure is measured, positive, and consistent with the raw counts.
"""

import json
import math
import subprocess
import sys

from composer.paths import ROOT


def _positive_finite(x):
    return isinstance(x, float) and math.isfinite(x) and x > 0


def test_cli_prints_the_result_as_its_last_line():
    done = subprocess.run([sys.executable, "-m", "composer", "bench", "env", "--tasks", "2", "--episodes", "2",
                           "--workers", "2"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert lines[0].startswith("env_steps_per_s")

    for key in ("env_steps_per_s", "env_steps_per_s_sequential", "time_share_pytest", "pytest_runs_per_step"):
        assert _positive_finite(result[key]), key
    assert result["target_steps_per_s"] == 20 and result["meets_target"] == (result["env_steps_per_s"] >= 20)
    concurrent, sequential = result["concurrent"], result["sequential"]
    assert (concurrent["episodes"], concurrent["workers"], sequential["workers"]) == (2, 2, 1)
    assert result["env_steps_per_s"] == concurrent["steps"] / concurrent["wall_s"]
    assert concurrent["steps"] >= 5 * 2  # view, run_tests, edit(s), run_tests, submit per episode
    assert result["rewards_ok"] and concurrent["gold_rewards"] == [1.0] and concurrent["wrong_rewards"] == [0.0]
    assert set(result["tool_ms_p50"]) == {"view", "run_tests", "edit", "submit"}
    assert all(_positive_finite(v) for v in result["pytest_breakdown_ms"].values())
    assert result["cpus"] >= 1 and result["isolation"] in ("root-ns", "user-ns", "plain")
