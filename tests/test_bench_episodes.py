"""composer.bench.episodes at its smallest through the CLI: the JSON last line, its keys, the same rewards both ways.

    .venv/bin/pytest -q tests/test_bench_episodes.py

No ratio is asserted (a benchmark, not a timed test): only that both arms replay the same rollouts to the same
tool messages and rewards, and that the ratio is derived from the measured medians.
"""

import json
import os
import subprocess
import sys

import pytest

from composer.bench import episodes
from composer.paths import ROOT


def test_cli_prints_the_result_as_its_last_line():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "composer", "bench", "episodes", "--episodes", "2", "--wait-s", "0.2"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert lines[-3].startswith("grading:") and lines[-2].startswith("waiting (simulated 0.2 s per submit)")
    assert (result["episodes"], result["generations"], result["repeats"]) == (2, 2, 1)
    for case in (result["grading"], result["waiting"]):
        assert case["rewards_equal"] and case["observations_equal"]
        assert case["ratio"] == case["concurrent_s"] / case["serial_s"] and case["serial_s"] > 0
        assert case["resolved"] == 2  # one task, the gold edits: both rollouts resolved
    assert result["waiting"]["wait_s"] == 0.2 and result["waiting"]["serial_s"] >= 2 * 0.2  # two submits waited
    assert {k: result[k] for k in ("serial_s", "concurrent_s", "ratio")} == \
        {k: result["grading"][k] for k in ("serial_s", "concurrent_s", "ratio")}


@pytest.mark.parametrize("kwargs", [dict(episodes=3), dict(generations=1, episodes=2), dict(repeats=0),
                                    dict(wait_s=-1)])
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError, match="episodes must be a multiple of generations"):
        episodes.measure(**kwargs)
