"""composer.bench.trainer: the result's shape and arithmetic, the CLI's last line, one CPU memory process.

    .venv/bin/pytest tests/test_bench_trainer.py

Timings are not asserted against the targets (a benchmark, not a timed test): only that they are measured,
positive, and that every ratio is the arms' median over GRPO's median. Operator counts are deterministic, so the
two-channel arm's is held to its target.
"""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from datasets import Dataset

from composer.bench import trainer
from composer.models import load_model, load_tokenizer
from composer.paths import ROOT
from composer.trainer import add_reference_logps

os.environ["HF_HUB_OFFLINE"] = "1"
RATIO_ARMS = {"00": "composer_00", "hint": "hint", "dpo": "dpo", "all": "all"}
ARM_KEYS = {"step_s_median", "step_s_p10", "step_s_p90", "peak_mem_bytes", "ops"}


@pytest.fixture(scope="module")
def result():
    return trainer.measure(size="tiny", repeats=2, memory=False)


@pytest.fixture(scope="module")
def small():
    """The benchmark's default size: two prompts a batch, so GRPO's rows are padded and the pairs ride in its
    forward (composer.trainer.ComposerTrainer._ride)."""
    return trainer.measure(size="small", repeats=1, memory=False)


def _positive_finite(x):
    return isinstance(x, float) and math.isfinite(x) and x > 0


def test_result_has_the_promised_keys(result):
    for key in ("ratio_00_time", "ratio_all_time", "ratio_all_mem", "arms", "device", "size", "repeats", "mode",
                "memory_method", "targets", "meets_targets", "scope"):
        assert key in result, key
    assert set(result["arms"]) == set(trainer.ARMS)
    for arm, figures in result["arms"].items():
        assert ARM_KEYS <= set(figures), arm
        assert figures["step_s_p10"] <= figures["step_s_median"] <= figures["step_s_p90"], arm
        assert len(result["samples_s"][arm]) == 2
    assert result["size"] == "tiny" and result["repeats"] == 2 and result["mode"] == "sampled_token"
    assert result["targets"] == {"ratio_00_time": 1.02, "ratio_all_time": 1.5, "ratio_all_mem": 1.3,
                                 "ratio_all_ops": 1.6}
    assert "generation excluded" in result["scope"]
    assert result["grpo_ignores_hint_keys"] is True
    json.dumps(result)  # what main prints


def test_ratios_are_median_over_grpo_median(result):
    arms = result["arms"]
    for key, arm in RATIO_ARMS.items():
        ratio = result["ratios"][f"ratio_{key}_time"]
        assert _positive_finite(ratio), key
        assert ratio == arms[arm]["step_s_median"] / arms["grpo"]["step_s_median"]
    for key in ("ratio_00_time", "ratio_all_time"):
        assert result[key] == result["ratios"][key]
        assert result["meets_targets"][key] is (result[key] <= result["targets"][key])


def test_no_memory_leaves_memory_fields_empty(result):
    assert result["memory_method"] is None
    assert result["ratio_all_mem"] is None and result["meets_targets"]["ratio_all_mem"] is None
    assert all(figures["peak_mem_bytes"] is None for figures in result["arms"].values())


def test_forward_passes_per_arm(result, small):
    """Where the extra time goes: 0/0 adds no forward; hint adds two teacher forwards (the distinct prompts once,
    then the completions on their cache); DPO one student forward of its pairs where GRPO's rows are unpadded
    (tiny: one prompt, completions at full length), none where they are padded (small: the pairs ride in GRPO's)."""
    expected = {"grpo": (1, 0), "composer_00": (1, 0), "hint": (1, 2), "dpo": (2, 0), "all": (2, 2)}
    got = {arm: (f["student_forwards"], f["teacher_forwards"]) for arm, f in result["arms"].items()}
    assert got == expected
    got = {arm: (f["student_forwards"], f["teacher_forwards"]) for arm, f in small["arms"].items()}
    assert got == {**expected, "dpo": (1, 0), "all": (1, 2)}


def test_operator_counts_and_their_ratios(result):
    """Every arm dispatches operators; each ratio is the counts' quotient; 0/0 dispatches exactly GRPO's; the
    channels dispatch more."""
    arms = result["arms"]
    assert all(isinstance(f["ops"], int) and f["ops"] > 0 for f in arms.values())
    for key, arm in RATIO_ARMS.items():
        assert result["ratios"][f"ratio_{key}_ops"] == arms[arm]["ops"] / arms["grpo"]["ops"]
    assert result["ratio_all_ops"] == result["ratios"]["ratio_all_ops"]
    assert result["meets_targets"]["ratio_all_ops"] is (result["ratio_all_ops"] <= result["targets"]["ratio_all_ops"])
    assert arms["composer_00"]["ops"] == arms["grpo"]["ops"]
    assert min(arms[arm]["ops"] for arm in ("hint", "dpo", "all")) > arms["grpo"]["ops"]


def test_both_channels_dispatch_at_most_the_target_times_grpos_operators(small):
    """A count, not a time: at the default size both channels' step stays within 1.6x GRPO's operators (2.9x before
    the pairs shared GRPO's forward and their own prompt)."""
    assert small["ratio_all_ops"] <= trainer.TARGETS["ratio_all_ops"], small["ratios"]


def test_work_floor_prices_each_token_at_grpos_cost(result):
    """The floor: the arm's student tokens plus a third of its teacher tokens, over GRPO's student tokens."""
    arms = result["arms"]
    grpo = arms["grpo"]["student_tokens"]
    assert grpo == arms["composer_00"]["student_tokens"] > 0 and arms["grpo"]["teacher_tokens"] == 0
    assert arms["hint"]["student_tokens"] == grpo and arms["hint"]["teacher_tokens"] > 0
    assert arms["dpo"]["student_tokens"] > grpo and arms["dpo"]["teacher_tokens"] == 0
    for arm in ("hint", "dpo", "all"):
        expected = (arms[arm]["student_tokens"] + arms[arm]["teacher_tokens"] / 3) / grpo
        assert result["work_floor_time"][arm] == pytest.approx(expected)
    assert result["work_floor_time"]["all"] > result["work_floor_time"]["dpo"] > 1


def test_cli_prints_json_last():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "composer", "bench", "trainer", "--size", "tiny", "--repeats", "1",
                           "--no-memory"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    last = json.loads(lines[-1])
    for key in ("ratio_00_time", "ratio_all_time", "ratio_all_mem", "ratio_all_ops"):
        assert key in last
    assert _positive_finite(last["ratio_all_time"]) and last["ratio_all_mem"] is None
    assert last["cpus"] >= 1 and last["load_average_1m_at_start"] >= 0 and last["machine"]
    assert any(line.startswith("ratio_all_time") for line in lines[:-1])  # the table comes first
    assert any(line.startswith("ratio_all_ops") for line in lines[:-1])


def test_an_unknown_size_names_the_sizes():
    with pytest.raises(ValueError, match="size must be one of .*'1.7b', 'live-tiny'.*, got 'huge'"):
        trainer.measure(size="huge")


@pytest.mark.skipif(not sys.platform.startswith("linux") or torch.cuda.is_available(),
                    reason="the CPU memory method reads Linux RSS; on CUDA the memory process measures GPU bytes")
def test_cpu_memory_process(tmp_path):
    """One fresh memory process (the `all` arm, tiny size): a positive peak, at least what stays resident."""
    model_path = trainer._model_path("tiny")
    tokenizer = load_tokenizer(model_path)
    pairs = add_reference_logps(Dataset.from_dict(trainer.PAIRS), load_model(model_path), tokenizer)
    built, _ = trainer._build("all", "tiny", model_path, tokenizer, trainer._train_dataset("tiny"), pairs,
                              str(tmp_path / "out"))
    data = tmp_path / "batch.pt"
    trainer.save_memory_data(data, model_path, trainer._generation_batch(built, "tiny"), pairs)
    out = trainer._memory("all", "tiny", str(data))
    assert out["arm"] == "all" and out["hwm_reset"] is True
    assert 0 < out["retained_mem_bytes"] <= out["peak_mem_bytes"] < 2**30
