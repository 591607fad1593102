"""GPU memory per device and GPU-hours of a live run, from stated assumptions: the tables in params/live headers.

    python -m composer plan            # the tables; exit 1 if a live YAML header does not carry its table as computed
    python -m composer plan --write    # rewrite the tables in the headers (between the PLAN_BEGIN / PLAN_END lines)

    from composer import plan
    plan.memory_gb(plan.MODELS["Qwen/Qwen3-8B"], Setup("lora", "colocate", 0.4, gpus=1), seq_tokens=16384)

An ESTIMATE, never a measurement: every number comes from the assumptions below and the live YAML's own workload
(student, steps, prompts, generations, max_completion_length). Memory per device, in GB (1e9 bytes):
- training state: full fine-tuning 16 bytes per parameter (fp32 master weights 4, fp32 gradients 4, Adam's two
  moments 8), LoRA 2 (the frozen bf16 base) plus 16 per adapter parameter (rank 16 on every linear layer:
  LORA_SHARE of the parameters); sharded over the GPUs that train (FSDP2 full shard); a full fine-tune's frozen
  hint teacher adds a bf16 copy (2, sharded; with LoRA the teacher is the adapter-disabled base: free);
- activations of one sequence of seq_tokens (micro-batch 1, gradient checkpointing): each layer's input kept
  (2 bytes x hidden), one layer recomputed (34 bytes x hidden, Korthikanti et al. 2022). The logits are never
  whole: TRL's fused LM head scores the tokens in tiles of 4,096 tokens x 32,768 vocabulary entries (HEAD_TILE_BYTES,
  counted in fp32);
- the trace-replay channel (dpo_pairs per micro-batch: the trainer shares trace_replay_batch_size pairs per step and
  process out over the step's micro-batches; the live 004 YAML gives each micro-batch one): under gradient
  checkpointing a pair cannot run on its prompt's cache (composer.trainer.completion_token_logps), so each pair is
  two whole sequences, chosen and rejected, counted as seq_tokens each (a pair's prompt is a step of a student
  trace), alive in the same graph as the rollout's until the one backward, plus the full logits (6 bytes x
  vocabulary) of their completions, one agent action of ACTION_TOKENS each; the rows assume every micro-batch
  carries its dpo_pairs, so at micro-batch 1 they add 2 x dpo_pairs sequences of training compute per rollout;
- vLLM: colocate reserves its memory fraction of every training GPU (the bf16 weights, unsharded at tensor
  parallel 1, and the KV cache in the rest); server mode puts vLLM on GPUs of its own (VLLM_SERVER_GPUS of them)
  and reserves nothing on the training GPUs;
- RUNTIME_GB for the CUDA context, NCCL buffers and allocator fragmentation.
GPU-hours per arm and seed: generation (the rollouts' tokens at GEN_TOKENS_PER_S per vLLM GPU), training (6 x
parameters x trained tokens FLOPs, 8 with a hint teacher's forward, and 6 x parameters x the DPO pairs' tokens, at
MFU of PEAK_FLOPS per GPU), grading
(GRADING_S per rollout over GRADERS containers at once), each step in turn; times every GPU the run holds.
"""

import argparse
import dataclasses
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from composer.paths import ROOT

GPU_GB = 80.0  # H100 80 GB
PEAK_FLOPS = 989e12  # H100 SXM dense bf16
MFU = 0.40
RUNTIME_GB = 3.0
LORA_SHARE = 0.005  # adapter parameters over model parameters at rank 16 on every linear layer (Qwen3-8B: ~0.5 %)
FILL = 0.6  # the share of max_completion_length an agentic rollout uses on average
GRADING_S = 60.0  # one submission's container grading on a real repository
GRADERS = 32  # containers grading at once (CPU cores of the node)
VLLM_SERVER_GPUS = 1  # GPUs given to `trl vllm-serve` in server mode
BYTES_PER_GB = 1e9
HEAD_TILE_BYTES = 4096 * 32768 * 4  # TRL 1.16's fused LM head: one [4,096 tokens, 32,768 vocabulary] tile, fp32
ACTION_TOKENS = 512  # a DPO pair's completion: one agent action (an assumption)

PLAN_BEGIN = "# --- plan: python -m composer plan --write (computed by composer/plan.py; do not edit) ---"
PLAN_END = "# --- end of plan ---"


@dataclass(frozen=True)
class Model:
    params_b: float  # billions of parameters
    layers: int
    hidden: int
    vocab: int
    kv_bytes_per_token: int  # 2 (K, V) x layers x KV heads x head dim x 2 bytes
    gen_tokens_per_s: float  # vLLM decoding throughput per GPU with batched requests (an assumption)


MODELS = {
    "Qwen/Qwen3-8B": Model(8.19, 36, 4096, 151_936, 2 * 36 * 8 * 128 * 2, 2_500.0),
}


@dataclass(frozen=True)
class Setup:
    mode: str  # "full" | "lora"
    vllm: str  # "colocate" | "server" | "none" (transformers generation)
    vllm_fraction: float  # colocate: vllm_gpu_memory_utilization
    gpus: int  # GPUs the run holds (server mode: VLLM_SERVER_GPUS of them serve, the rest train)
    hint_teacher: bool = False  # ComposerTrainer's frozen hint teacher (a forward per step)
    dpo_pairs: int = 0  # the trace-replay channel's pairs per micro-batch (0: channel off)

    def __post_init__(self):
        if self.mode not in ("full", "lora"):
            raise ValueError(f"mode {self.mode!r}: 'full' or 'lora'")
        if self.vllm not in ("colocate", "server", "none"):
            raise ValueError(f"vllm {self.vllm!r}: 'colocate', 'server' or 'none'")
        if not 0 <= self.vllm_fraction < 1 or (self.vllm == "colocate") != (self.vllm_fraction > 0):
            raise ValueError(f"vllm_fraction {self.vllm_fraction}: in (0, 1) with colocate, 0 otherwise")
        if self.gpus < 1 or (self.vllm == "server" and self.gpus <= VLLM_SERVER_GPUS):
            raise ValueError(f"gpus {self.gpus}: at least 1, and more than {VLLM_SERVER_GPUS} in server mode")
        if self.dpo_pairs < 0:
            raise ValueError(f"dpo_pairs {self.dpo_pairs}: 0 (no trace-replay channel) or more")

    @property
    def training_gpus(self) -> int:
        return self.gpus - VLLM_SERVER_GPUS if self.vllm == "server" else self.gpus


def memory_gb(model: Model, setup: Setup, *, seq_tokens: int) -> dict:
    """GB per training GPU, by part, and whether it fits in GPU_GB (see the module doc)."""
    p = model.params_b * 1e9
    state = 16 * p if setup.mode == "full" else 2 * p + 16 * LORA_SHARE * p
    if setup.hint_teacher and setup.mode == "full":
        state += 2 * p
    sequences = 1 + 2 * setup.dpo_pairs  # the rollout, and each pair's chosen and rejected
    activations = (sequences * seq_tokens * (model.layers * 2 * model.hidden + 34 * model.hidden) + HEAD_TILE_BYTES
                   + 2 * setup.dpo_pairs * ACTION_TOKENS * 6 * model.vocab)
    parts = {"training_state": state / setup.training_gpus / BYTES_PER_GB,
             "activations": activations / BYTES_PER_GB,
             "vllm": setup.vllm_fraction * GPU_GB,
             "runtime": RUNTIME_GB}
    total = sum(parts.values())
    # colocated vLLM must hold the whole bf16 model and one sequence's KV cache inside its fraction
    vllm_room = setup.vllm != "colocate" or parts["vllm"] >= (2 * p + seq_tokens * model.kv_bytes_per_token) / BYTES_PER_GB
    return {**parts, "total": total, "fits": total <= GPU_GB and vllm_room, "vllm_holds_model": vllm_room}


def gpu_hours(model: Model, setup: Setup, *, steps: int, rollouts_per_step: int, tokens_per_rollout: float) -> dict:
    """Hours of one training run (one arm, one seed) and GPU-hours (see the module doc)."""
    tokens = rollouts_per_step * tokens_per_rollout
    serving = VLLM_SERVER_GPUS if setup.vllm == "server" else setup.gpus
    generate_s = tokens / (model.gen_tokens_per_s * serving)
    dpo_tokens = tokens * 2 * setup.dpo_pairs  # every micro-batch of one rollout trains dpo_pairs pairs
    flops = ((8 if setup.hint_teacher else 6) * tokens + 6 * dpo_tokens) * model.params_b * 1e9
    train_s = flops / (MFU * PEAK_FLOPS * setup.training_gpus)
    grade_s = math.ceil(rollouts_per_step / GRADERS) * GRADING_S
    step_s = generate_s + train_s + grade_s
    hours = steps * step_s / 3600
    return {"generate_s": generate_s, "train_s": train_s, "grade_s": grade_s, "step_s": step_s, "hours": hours,
            "gpu_hours": hours * setup.gpus}


# The rows of each live profile's table: setups a researcher would try, chosen to show what fits.
SETUPS = {
    "002a-trace-collection-trl": [Setup("full", "colocate", 0.4, 1), Setup("lora", "colocate", 0.4, 1),
                                  Setup("full", "colocate", 0.4, 8)],
    # arm B (the trace-replay channel; A is the same without it), at the YAML's pairs per micro-batch
    "004-ab-train-grpo-vs-trace-replay-dpo": [Setup("lora", "colocate", 0.4, 1, dpo_pairs=1),
                                              Setup("lora", "server", 0, 2, dpo_pairs=1),
                                              Setup("full", "colocate", 0.4, 8, dpo_pairs=1),
                                              Setup("full", "server", 0, 8, dpo_pairs=1),
                                              Setup("full", "server", 0, 8, dpo_pairs=2)],
}


def workload(values: dict) -> dict:
    """Model, steps, rollouts per step and sequence length of a live profile's parameters."""
    per_step = values.get("prompts_per_step") or values["n_prompts"] // values["steps"]
    return {"model": values["student"], "steps": values["steps"], "rollouts_per_step": per_step * values["generations"],
            "seq_tokens": values["max_completion_length"],
            "tokens_per_rollout": FILL * values["max_completion_length"]}


def table(slug: str, values: dict) -> list[str]:
    """The header lines of one live profile's plan (comment lines, PLAN_BEGIN to PLAN_END)."""
    w = workload(values)
    model = MODELS[w["model"]]
    lines = [PLAN_BEGIN,
             f"# {w['model']}: {w['steps']} steps x {w['rollouts_per_step']} rollouts, sequences up to {w['seq_tokens']} "
             f"tokens (~{w['tokens_per_rollout']:.0f} per rollout); GPUs of {GPU_GB:.0f} GB; ESTIMATES (module doc).",
             "# | mode | vLLM (memory fraction) | GPUs | GB per training GPU (state + activations + vLLM + runtime) "
             "| fits | hours | GPU-hours per arm and seed |"]
    for setup in SETUPS[slug]:
        mem = memory_gb(model, setup, seq_tokens=w["seq_tokens"])
        cost = gpu_hours(model, setup, steps=w["steps"], rollouts_per_step=w["rollouts_per_step"],
                         tokens_per_rollout=w["tokens_per_rollout"])
        vllm = {"colocate": f"colocate ({setup.vllm_fraction})", "server": f"server ({VLLM_SERVER_GPUS} GPU)",
                "none": "none"}[setup.vllm]
        fits = "yes" if mem["fits"] else "no" + ("" if mem["vllm_holds_model"] else " (vLLM's share < the model)")
        extras = (" + hint teacher" if setup.hint_teacher else "") + (
            f" + DPO ({setup.dpo_pairs} pair{'s' if setup.dpo_pairs > 1 else ''})" if setup.dpo_pairs else "")
        lines.append(f"# | {setup.mode}{extras} | {vllm} | {setup.gpus} | "
                     f"{mem['total']:.1f} ({mem['training_state']:.1f} + {mem['activations']:.1f} + "
                     f"{mem['vllm']:.1f} + {mem['runtime']:.1f}) | {fits} | {cost['hours']:.2f} | "
                     f"{cost['gpu_hours']:.1f} |")
    if slug == "004-ab-train-grpo-vs-trace-replay-dpo":
        from composer import power
        lines += power.lines(values)
    return lines + [PLAN_END]


def _split(text: str) -> tuple[str, str]:
    """(header without its plan block, the rest of the file)."""
    body = re.search(r"^(?!#)", text, flags=re.M)
    head, rest = text[:body.start()], text[body.start():]
    head = re.sub(rf"{re.escape(PLAN_BEGIN)}\n.*?{re.escape(PLAN_END)}\n", "", head, flags=re.S)
    return head, rest


def render(path: Path) -> str:
    """The live YAML at `path` with its plan block as computed (placed after the header's comments)."""
    text = path.read_text()
    head, rest = _split(text)
    return head + "\n".join(table(path.stem, yaml.safe_load(text))) + "\n" + rest


def main(argv=None) -> int:
    from composer import power
    defaults = power.Assumptions()
    parser = argparse.ArgumentParser(prog="python -m composer plan", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the plan blocks of params/live/*.yaml")
    parser.add_argument("--budget-usd", type=float, help="print the live 004 design that detects the smallest B - A "
                        "within this many dollars (composer/power.py), JSON last")
    parser.add_argument("--effect", type=float, default=0.02, help="with --budget-usd, also the cheapest design that "
                        "detects this B - A (default 0.02)")
    for name, value in vars(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=value,
                            help=f"power assumption (composer/power.py; default {value})")
    args = parser.parse_args(argv)
    if args.budget_usd is not None:
        return _budget(args, power.Assumptions(**{k: getattr(args, k) for k in vars(defaults)}))
    stale = []
    for slug in SETUPS:
        path = ROOT / "params" / "live" / f"{slug}.yaml"
        want = render(path)
        print(f"{path.relative_to(ROOT)}:\n" + "\n".join(table(slug, yaml.safe_load(path.read_text()))) + "\n")
        if want != path.read_text():
            if args.write:
                path.write_text(want)
            else:
                stale.append(str(path.relative_to(ROOT)))
    if stale:
        print(f"out of date (run with --write): {', '.join(stale)}", file=sys.stderr)
    return 1 if stale else 0


def _budget(args, assumptions) -> int:
    from composer import power
    if not args.budget_usd > 0:
        print(f"--budget-usd must be > 0, got {args.budget_usd}", file=sys.stderr)
        return 2
    values = yaml.safe_load((ROOT / "params/live/004-ab-train-grpo-vs-trace-replay-dpo.yaml").read_text())
    found = power.best(args.budget_usd, values, assumptions, effect=args.effect)
    own = power.design(values, assumptions)
    print(f"assumptions: {json.dumps(dataclasses.asdict(assumptions))} (composer/power.py)")
    print(f"the live profile's design: {own['seeds']} seeds x {own['tasks']} tasks ({own['pool']}) x {own['samples']} "
          f"samples, mde {own['mde']:.3f}, ${own['usd']:,.0f}")
    if found is None:
        print(f"no design fits ${args.budget_usd:,.0f}: the cheapest costs more")
    else:
        print(f"best within ${args.budget_usd:,.0f}: {found['mode']} ({found['gpus']} GPUs, vLLM {found['vllm']}), "
              f"{found['steps']} steps, {found['seeds']} seeds x {found['tasks']} tasks ({found['pool']}: "
              f"{power.POOLS[found['pool']][1]}) x {found['samples']} samples: detects B - A >= {found['mde']:.3f} "
              f"with 80 % power for ${found['usd']:,.0f}")
        cheapest = found["cheapest_for_effect"]
        print(f"to detect {args.effect}: " + (f"{cheapest['seeds']} seeds x {cheapest['tasks']} tasks ({cheapest['pool']}) "
                                              f"x {cheapest['samples']} samples, ${cheapest['usd']:,.0f}" if cheapest
                                              else "no design in the grid"))
    print(json.dumps({"budget_usd": args.budget_usd, "assumptions": dataclasses.asdict(assumptions),
                      "live_design": own, "best": found}))
    return 0
