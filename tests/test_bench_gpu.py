"""scripts/gpu-check.sh (composer.bench.gpu) in its reduced mode: the suite's run of the prepared device check.

On a GPU machine the same script runs the full check; here the trainer part runs at the tiny size on CPU and the
vLLM part says why it did not run."""

import json
import math
import subprocess

from composer.paths import ROOT


def test_reduced_check_prints_its_figures_as_one_json_line():
    done = subprocess.run([str(ROOT / "scripts/gpu-check.sh"), "--reduced"], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["mode"] == "reduced" and result["vllm"] == {"skipped": "reduced mode (--reduced)"}
    trainer = result["trainer"]
    assert "error" not in trainer and trainer["size"] == "tiny" and trainer["repeats"] == 2
    for key in ("ratio_00_time", "ratio_all_time", "train_tokens_per_s_all"):
        assert math.isfinite(trainer[key]) and trainer[key] > 0, key
    assert trainer["train_tokens_per_s_all"] == trainer["tokens_per_step"] / trainer["step_s_median"]["all"]
    assert set(trainer["step_s_median"]) == {"grpo", "composer_00", "hint", "dpo", "all"}
    assert result["cpus"] >= 1 and result["cuda"] == (result["gpu"] is not None)


def test_an_unknown_option_is_refused():
    done = subprocess.run([str(ROOT / "scripts/gpu-check.sh"), "--fast"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "unrecognized arguments: --fast" in done.stderr
