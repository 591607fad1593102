"""composer.bench.replay at a tiny size through the CLI: the JSON last line, its keys and its arithmetic.

    .venv/bin/pytest tests/test_bench_replay.py

The targets (fan-out <= 1.10, >= 200 calls/s) are not asserted: a benchmark, not a timed test on a shared
machine. The cost figures are deterministic projections and are checked against each other.
"""

import json
import math
import os
import subprocess
import sys

from composer.paths import ROOT

SIZE = ["--traces", "1", "--steps", "1", "--time-scale", "0.05", "--calls-traces", "4", "--calls-steps", "2",
        "--concurrency", "8", "--cost-traces", "2"]


def test_cli_prints_the_result_as_its_last_line():
    done = subprocess.run([sys.executable, "-m", "composer", "bench", "replay", *SIZE], capture_output=True, text=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"), cwd=ROOT, timeout=600)  # a hang guard
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert lines[0].startswith("fanout_ratio") and lines[1].startswith("calls_per_s")
    assert result["cpus"] >= 1 and result["load_average_1m_at_start"] >= 0 and result["machine"]

    fan, calls, cost = result["fanout"], result["throughput"], result["cost"]
    assert result["fanout_ratio"] == fan["fanout_ratio"] >= 1.0 and math.isfinite(fan["fanout_ratio_max"])
    assert (fan["traces"], fan["steps"], fan["calls"]) == (1, 1, 3)
    assert calls["calls"] == 4 * 2 * 3 and calls["errors"] == 0
    assert result["calls_per_s"] == calls["calls"] / calls["wall_s"] > 0
    assert calls["client_cpu_ms_per_call"] > 0 and calls["server_cpu_ms_per_call"] > 0
    assert calls["calls_per_s_two_free_cores"] == 1e3 / max(calls["client_cpu_ms_per_call"],
                                                            calls["server_cpu_ms_per_call"])
    assert result["naive_usd_per_trace"] == cost["naive_usd_per_trace"] > result["cached_usd_per_trace"]
    assert result["best_usd_per_trace"] <= result["cached_usd_per_trace"]
    assert cost["cache_saving"] == result["naive_usd_per_trace"] / result["cached_usd_per_trace"]
    names = [c["name"] for c in cost["configurations"]]
    assert cost["best_configuration"] in names and len(names) == 6 and cost["cost_traces"] == 2
    assert result["meets_targets"]["cache_saving"] is (cost["cache_saving"] >= 3)
    assert result["meets_targets"]["usd_per_trace_aim"] is (result["best_usd_per_trace"] <= 1)
    assert set(result["targets"]) == set(result["meets_targets"])
