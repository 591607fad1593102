"""composer.bench.teachers at a tiny size through the CLI: 003's teacher queries the server's way and HF's plain way,
the JSON last line, its keys and its arithmetic.

    .venv/bin/pytest tests/test_bench_teachers.py

The speedup is not asserted against a target (a benchmark, not a timed test): only that both variants did the same
work and gave the same answers.
"""

import json
import os
import subprocess
import sys

from composer.paths import ROOT


def test_cli_measures_the_same_queries_twice_and_prints_the_ratio_last():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "composer", "bench", "teachers", "--profile", "smoke", "--traces", "1",
                           "--k", "2", "--max-tokens", "8"], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert lines[0].startswith("003's teacher queries") and "same answers: True" in lines[1]
    assert result["same_answers"] is True and result["differing_samples"] == 0
    assert result["completion_tokens"] == result["completion_tokens_plain"] > 0
    assert result["traces"] == 1 and result["k"] == 2
    assert result["samples"] == result["steps"] * 3 * 2 > 0 and result["mean_prompt_tokens"] > 0
    assert result["speedup"] == result["wall_s_plain"] / result["wall_s_server"] > 0
    assert result["cpus"] >= 1 and result["load_average_1m_at_start"] >= 0
