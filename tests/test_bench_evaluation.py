"""composer.bench.evaluation at the smoke zoo through the CLI: the JSON last line, its keys and its arithmetic.

    .venv/bin/pytest tests/test_bench_evaluation.py

The speedup is not asserted against a target (a benchmark, not a timed test): only that both ways are measured on
the same tasks and the ratio is derived from them.
"""

import json
import os
import subprocess
import sys

import pytest

from composer.bench import evaluation
from composer.paths import ROOT


def test_cli_prints_the_result_as_its_last_line():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "composer", "bench", "evaluation", "--profile", "smoke", "--tasks",
                           "2", "--batch", "2"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert lines[-4].startswith("one_at_a_time") and lines[-2].startswith("speedup")
    one, lockstep = result["one_at_a_time"], result["lockstep"]
    assert (one["batch_size"], lockstep["batch_size"], result["tasks"], result["profile"]) == (1, 2, 2, "smoke")
    assert list(one["scores"]) == list(lockstep["scores"]) and len(one["scores"]) == 2
    assert result["speedup"] == one["wall_s"] / lockstep["wall_s"] > 0
    assert result["same_scores"] == sum(one["scores"][t] == lockstep["scores"][t] for t in one["scores"]) / 2
    assert one["turns"] > 0 and lockstep["turns"] > 0 and result["cpus"] >= 1


@pytest.mark.parametrize("kwargs,message", [
    (dict(profile="nope"), "profile must be one of"),
    (dict(profile="smoke", batch=1), "batch >= 2"),
    (dict(profile="smoke", tasks=0), "tasks must be >= 1"),
    (dict(profile="smoke", engine="sglang"), r"engine must be one of \('transformers', 'vllm'\), got 'sglang'"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        evaluation.measure(**kwargs)
