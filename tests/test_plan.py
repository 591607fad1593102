"""composer.plan: the memory and GPU-hour arithmetic on hand-computed inputs, bad setups, and the live YAML headers
carrying exactly what it computes (so the tables are never hand-typed)."""

import shlex
import subprocess
import sys

import pytest
import yaml

from composer import collect, plan
from composer.paths import ROOT

# 1e9 parameters, 2 layers, hidden 10, vocabulary 100, KV 8 bytes per token, 1,000 generated tokens/s
TOY = plan.Model(1.0, 2, 10, 100, 8, 1000.0)


def test_memory_parts_by_hand():
    full = plan.memory_gb(TOY, plan.Setup("full", "colocate", 0.4, 1), seq_tokens=1000)
    # activations: 1000 tokens x (2 layers x 2 bytes x 10 + 34 x 10) = 380,000 bytes, and the fused head's one
    # [4096, 32768] fp32 tile (the logits are never whole)
    tile = 4096 * 32768 * 4
    assert full["training_state"] == 16.0 and full["activations"] == pytest.approx((380_000 + tile) / 1e9)
    assert full["vllm"] == 32.0 and full["runtime"] == plan.RUNTIME_GB
    assert full["total"] == pytest.approx(16 + (380_000 + tile) / 1e9 + 32 + 3) and full["fits"]
    assert full["vllm_holds_model"]
    # two DPO pairs: four more whole sequences, and the full logits of four 512-token actions (6 bytes x 100)
    dpo = plan.memory_gb(TOY, plan.Setup("full", "colocate", 0.4, 1, dpo_pairs=2), seq_tokens=1000)
    assert dpo["activations"] == pytest.approx((5 * 380_000 + tile + 4 * 512 * 600) / 1e9)
    lora = plan.memory_gb(TOY, plan.Setup("lora", "colocate", 0.4, 2), seq_tokens=1000)
    assert lora["training_state"] == pytest.approx((2 + 16 * plan.LORA_SHARE) / 2)
    teacher = plan.memory_gb(TOY, plan.Setup("full", "none", 0, 4, hint_teacher=True), seq_tokens=1000)
    assert teacher["training_state"] == pytest.approx(18 / 4) and teacher["vllm"] == 0
    server = plan.memory_gb(TOY, plan.Setup("full", "server", 0, 3), seq_tokens=1000)
    assert server["training_state"] == 8.0  # 2 of the 3 GPUs train
    # colocated vLLM must hold the bf16 model (2 GB) and one sequence's KV: 2.1 GB at 5% of 80 GB does not fit it
    tight = plan.memory_gb(plan.Model(1.0, 2, 10, 100, 100_000_000, 1000.0), plan.Setup("lora", "colocate", 0.05, 1),
                           seq_tokens=1000)
    assert tight["vllm"] == 4.0 and not tight["vllm_holds_model"] and not tight["fits"]


def test_gpu_hours_by_hand():
    cost = plan.gpu_hours(TOY, plan.Setup("full", "colocate", 0.4, 2), steps=10, rollouts_per_step=40,
                          tokens_per_rollout=500)
    assert cost["generate_s"] == 40 * 500 / (1000 * 2)
    assert cost["train_s"] == pytest.approx(6e9 * 20_000 / (plan.MFU * plan.PEAK_FLOPS * 2))
    assert cost["grade_s"] == 2 * plan.GRADING_S  # 40 rollouts over 32 graders: two rounds
    assert cost["hours"] == pytest.approx(10 * cost["step_s"] / 3600) and cost["gpu_hours"] == 2 * cost["hours"]
    served = plan.gpu_hours(TOY, plan.Setup("full", "server", 0, 3, hint_teacher=True), steps=10,
                            rollouts_per_step=40, tokens_per_rollout=500)
    assert served["generate_s"] == 40 * 500 / 1000  # one serving GPU
    assert served["train_s"] == pytest.approx(8e9 * 20_000 / (plan.MFU * plan.PEAK_FLOPS * 2))
    dpo = plan.gpu_hours(TOY, plan.Setup("full", "none", 0, 2, dpo_pairs=1), steps=10, rollouts_per_step=40,
                         tokens_per_rollout=500)
    # every rollout's micro-batch also trains one pair: chosen and rejected, as long as a rollout
    assert dpo["train_s"] == pytest.approx(6e9 * (20_000 + 40_000) / (plan.MFU * plan.PEAK_FLOPS * 2))


@pytest.mark.parametrize("args, message", [
    (("half", "none", 0, 1), "mode 'half'"),
    (("full", "remote", 0, 1), "vllm 'remote'"),
    (("full", "colocate", 0, 1), "vllm_fraction 0"),
    (("full", "none", 0.3, 1), "vllm_fraction 0.3"),
    (("full", "server", 0, 1), "more than 1 in server mode"),
    (("full", "none", 0, 1, False, -1), "dpo_pairs -1"),
])
def test_bad_setups_are_refused_by_name(args, message):
    with pytest.raises(ValueError, match=message):
        plan.Setup(*args)


def test_an_8b_full_fine_tune_with_colocated_vllm_does_not_fit_one_gpu():
    values = yaml.safe_load((ROOT / "params/live/002a-trace-collection-trl.yaml").read_text())
    rows = {(s.mode, s.gpus): plan.memory_gb(plan.MODELS[values["student"]], s,
                                             seq_tokens=values["max_completion_length"])["fits"]
            for s in plan.SETUPS["002a-trace-collection-trl"]}
    assert rows == {("full", 1): False, ("lora", 1): True, ("full", 8): True}


def test_the_004_rows_are_the_live_configuration():
    """The plan's micro-batch of one rollout and its DPO pairs per micro-batch are what the live YAML sets; at those
    settings only vLLM on a GPU of its own fits, and the YAML runs that one: vLLM's server mode, the launcher on the
    other GPUs, a step's rollouts split evenly over its processes."""
    values = yaml.safe_load((ROOT / "params/live/004-ab-train-grpo-vs-trace-replay-dpo.yaml").read_text())
    assert values["trainer_config"]["per_device_train_batch_size"] == 1
    fits = {(s.mode, s.vllm, s.dpo_pairs): plan.memory_gb(plan.MODELS[values["student"]], s,
                                                          seq_tokens=values["max_completion_length"])["fits"]
            for s in plan.SETUPS["004-ab-train-grpo-vs-trace-replay-dpo"]}
    assert fits == {("lora", "colocate", 1): False, ("lora", "server", 1): True, ("full", "colocate", 1): False,
                    ("full", "server", 1): True, ("full", "server", 2): False}
    [fitting] = [s for s in plan.SETUPS["004-ab-train-grpo-vs-trace-replay-dpo"]
                 if (s.mode, s.vllm, s.dpo_pairs) == ("full", "server", 1)]
    assert values["trainer_config"]["vllm_mode"] == fitting.vllm
    launcher = shlex.split(values["launcher"])
    processes = int(launcher[launcher.index("--num_processes") + 1])
    # scripts/with-server.sh SERVER URL env CUDA_VISIBLE_DEVICES=... accelerate launch ...: the job's own server
    assert launcher[0] == "scripts/with-server.sh" and "composer.vllm_server" in launcher[1]
    server = launcher[1].split("CUDA_VISIBLE_DEVICES=")[1].split()[0].split(",")
    devices = next(a for a in launcher[3:] if a.startswith("CUDA_VISIBLE_DEVICES=")).split("=")[1].split(",")
    assert processes == len(devices) == fitting.training_gpus
    assert len(server) == plan.VLLM_SERVER_GPUS and not set(server) & set(devices)
    rollouts = values["prompts_per_step"] * values["generations"]
    micro_batches = collect.split_rollouts(rollouts, processes, 1)[1]  # raises if the rollouts do not split
    assert micro_batches == rollouts // processes
    # the trainer shares a step's pairs (per process) out over its micro-batches: each carries the row's dpo_pairs
    sizes = {a.get("trace_replay_batch_size") for a in values["arms"].values() if a.get("trace_replay_weight")}
    assert sizes == {fitting.dpo_pairs * micro_batches}


def test_the_live_headers_carry_the_computed_tables():
    for slug in plan.SETUPS:
        path = ROOT / "params" / "live" / f"{slug}.yaml"
        assert plan.render(path) == path.read_text(), f"{path.name}: run python -m composer plan --write"
        assert "\n".join(plan.table(slug, yaml.safe_load(path.read_text()))) in path.read_text()
    done = subprocess.run([sys.executable, "-m", "composer", "plan"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and "GPU-hours per arm and seed" in done.stdout


def test_a_stale_header_is_reported(tmp_path, monkeypatch):
    (tmp_path / "params" / "live").mkdir(parents=True)
    for slug in plan.SETUPS:
        text = (ROOT / "params" / "live" / f"{slug}.yaml").read_text()
        (tmp_path / "params" / "live" / f"{slug}.yaml").write_text(text.replace("| yes |", "| no |"))
    monkeypatch.setattr(plan, "ROOT", tmp_path)
    assert plan.main([]) == 1
    assert plan.main(["--write"]) == 0 and plan.main([]) == 0
