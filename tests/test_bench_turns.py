"""composer.bench.turns at the smoke zoo through the CLI: the JSON last line, its keys and its arithmetic.

    .venv/bin/pytest tests/test_bench_turns.py

The speedup is not asserted against a target (a benchmark, not a timed test): only that both arms are measured on
the same work (greedy: the same completions up to near-ties) and the ratio is derived from their medians.
"""

import json
import os
import subprocess
import sys

import pytest

from composer.bench import turns
from composer.paths import ROOT


def test_cli_prints_the_result_as_its_last_line():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "composer", "bench", "turns", "--profile", "smoke", "--tasks", "1",
                           "--generations", "2", "--repeats", "1"], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert lines[-4].startswith("stock") and lines[-3].startswith("cached") and lines[-2].startswith("speedup")
    stock, cached = result["stock"], result["cached"]
    assert (result["profile"], result["tasks"], result["generations"], len(stock["wall_s"])) == ("smoke", 1, 2, 1)
    assert result["speedup"] == stock["median_s"] / cached["median_s"] > 0
    assert isinstance(result["same_completions"], bool)  # greedy both ways: the same tokens up to near-ties
    assert stock["mean_completion_tokens"] > 0 and cached["mean_completion_tokens"] > 0 and result["cpus"] >= 1


@pytest.mark.parametrize("kwargs,message", [
    (dict(profile="nope"), "profile must be one of"),
    (dict(profile="smoke", generations=1), "generations >= 2"),
    (dict(profile="smoke", tasks=0), "tasks and repeats must be >= 1"),
])
def test_bad_arguments_are_refused_with_the_argument_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        turns.measure(**kwargs)
