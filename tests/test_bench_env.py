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
                           "--workers", "2"], capture_output=True, text=True, cwd=ROOT, timeout=600)
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
    assert set(result["pytest_breakdown_ms"]) >= {"run_pytest", "worker_start_and_run", "worker_run"}
    worker = result["worker"]  # the same episodes with a per-episode PytestWorker, measured in the same process
    assert (worker["episodes"], worker["workers"], worker["gold_rewards"], worker["wrong_rewards"]) == (2, 2, [1.0], [0.0])
    assert result["env_steps_per_s_worker"] == worker["steps"] / worker["wall_s"] and worker["steps"] == concurrent["steps"]
    assert result["worker_speedup"] == result["env_steps_per_s_worker"] / result["env_steps_per_s"]
    assert result["cpu_ms_per_step"] == concurrent["cpu_s"] / concurrent["steps"] * 1e3
    assert result["cpu_ms_per_step_worker"] == worker["cpu_s"] / worker["steps"] * 1e3
    assert 0 < concurrent["cpu_s"] and 0 < worker["cpu_s"]
    assert "with a worker" in done.stdout
    if result["isolation"] == "root-ns":  # containment's cost against a PID namespace alone, in the same run
        bare = result["uncontained"]
        assert (bare["episodes"], bare["gold_rewards"], bare["wrong_rewards"]) == (2, [1.0], [0.0])
        assert result["env_steps_per_s_uncontained"] == bare["steps"] / bare["wall_s"]
        assert result["sandbox_overhead"] == result["env_steps_per_s_uncontained"] / result["env_steps_per_s"]
        assert result["target_sandbox_overhead"] == 1.3 and "containment" in done.stdout
        assert result["forked_runs"] is True  # grading and run_tests start from the fork server, not bwrap
    assert _positive_finite(result["grading_s_per_submission"])
    assert result["load_average_1m_at_start"] >= 0 and result["machine"]
    assert result["cpus"] >= 1 and result["isolation"] in ("root-ns", "user-ns", "plain")


def test_no_worker_skips_the_comparison():
    done = subprocess.run([sys.executable, "-m", "composer", "bench", "env", "--tasks", "1", "--episodes", "2",
                           "--workers", "1", "--no-worker"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["worker"] is None and result["env_steps_per_s_worker"] is None and result["worker_speedup"] is None
    assert result["cpu_ms_per_step_worker"] is None and _positive_finite(result["cpu_ms_per_step"])
    assert _positive_finite(result["env_steps_per_s"]) and result["rewards_ok"]


def test_bad_arguments_are_refused():
    done = subprocess.run([sys.executable, "-m", "composer", "bench", "env", "--episodes", "many"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2 and "invalid int value" in done.stderr


def test_container_backend_times_start_tests_and_grading_of_a_real_instance(real_record):
    done = subprocess.run([sys.executable, "-m", "composer", "bench", "env", "--backend", "container", "--episodes",
                           "2", "--workers", "2"], capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["backend"] == "container" and result["instance_id"] == real_record["instance_id"]
    assert result["rewards_ok"] and all(_positive_finite(result[k]) for k in ("start_s_p50", "run_tests_s_p50",
                                                                              "grading_s_p50", "speedup_at_once"))
    assert set(result["episodes_per_s"]) == {"1", "2"} and result["cpus"] >= 1
    assert all(_positive_finite(x) for k in ("grading_with_plain_values_s", "grading_without_plain_values_s")
               for x in result[k]) and "grading_plain_values_added_s" in result
    rewards = [(e["gold"], e["reward"]) for run in result["runs"].values() for e in run["episodes"]]
    assert sorted(rewards) == [(False, 0.0), (False, 0.0), (True, 1.0), (True, 1.0)]
