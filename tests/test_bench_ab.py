"""composer.bench.ab: one seed of every arm trained in fresh spawned processes, through the CLI.

    .venv/bin/pytest -q tests/test_bench_ab.py

Runs at the notebook's default (smoke) scale. Timings are not asserted against the target (a benchmark, not a
timed test): only that each arm was measured in its own process and that the ratio is B's time over A's.
"""

import json
import os
import subprocess
import sys

from composer.paths import ROOT


def test_the_cli_prints_each_arms_time_and_memory_and_the_ratio_last():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "composer", "bench", "ab", "--profile", "default"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result["arms"]) == {"A", "B"} and result["profile"] == "default"
    assert result["cpus"] >= 1 and result["load_average_1m_at_start"] >= 0 and result["machine"]
    for figures in result["arms"].values():
        assert figures["wall_s"] > 0 and figures["peak_rss_bytes"] > 100 * 2**20
    a, b = result["arms"]["A"], result["arms"]["B"]
    assert result["b_over_a_time"] == round(b["wall_s"] / a["wall_s"], 3)
    assert result["b_over_a_mem"] == round(b["peak_rss_bytes"] / a["peak_rss_bytes"], 3)
    assert result["meets_targets"]["b_over_a_time"] == (b["wall_s"] / a["wall_s"] <= 1.5)
    assert "evaluation excluded" in result["scope"] and result["pairs"]["pairs"] > 0 and "shuffled" not in result["pairs"]
