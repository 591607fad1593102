"""The plan's cost model (composer.costs.compute) against published agentic RL runs, each at its own layout.

    python -m composer plan --published      # a table: the plan's GPU-hours beside each run's, JSON last

    from composer.costs import calibration
    calibration.rows()    # [{"run": "DeepSWE-Preview", "plan_gpu_hours": ..., "ratio": ..., ...}, ...]

A run that publishes its steps gets a ratio (the plan's GPU-hours over the published ones); one that does not (SkyRL-v0
stopped on wall time, under a 100-epoch cap) gets the steps the plan says its GPU-hours bought, in epochs of its
training set. None of these runs publishes its time by phase, so no component is checked on its own, and an
agreement may come from errors that cancel. Every figure below is the run's published script or post (named beside
it); the workload follows compute.workload (FILL of the turn and token budgets).
"""

from dataclasses import dataclass

from composer.costs import compute
from composer.costs.compute import Model, Setup

# OpenHands-7B-Agent (SkyRL-Agent-7B-v0's start) is a Qwen2.5-Coder-7B-Instruct fine-tune: its config.json has 28
# layers, hidden size 3,584, 28 query heads and 4 KV heads of dimension 128, a 152,064-token vocabulary.
QWEN25_CODER_7B = Model(7.62, 28, 3584, 152_064, 2 * 28 * 4 * 128 * 2, 28 * 128)


@dataclass(frozen=True)
class Published:
    run: str
    source: str
    model: Model
    setup: Setup
    rollouts_per_step: int
    max_turns: int
    context: int  # prompt + response tokens an episode may reach
    graders: int  # sandboxes at once
    gpu_hours: float
    steps: int | None  # None: not published
    steps_per_epoch: int | None = None


RUNS = (
    # together.ai/blog/deepswe (2025-07-02): "across six days on 64 H100 GPUs", "200 steps", "512 (BS=64, 8 passes)
    # Docker containers in parallel"; rllm-org/rllm scripts/agent/swe/deepswe_32b.sh at bc4532cf (the blog's batch
    # of 64 on 8 nodes): agent.max_steps=50, prompt 4,096 + response 32,768 tokens, hybrid engine (colocated) at
    # gpu_memory_utilization 0.6, tensor_model_parallel_size 8, Ulysses sequence parallel 8, parameter and optimizer
    # offload, no KL loss.
    Published("DeepSWE-Preview (Qwen3-32B)", "together.ai/blog/deepswe; rllm scripts/agent/swe/deepswe_32b.sh",
              compute.MODELS["Qwen/Qwen3-32B"], Setup("full", "colocate", 0.6, 64, tp=8, sp=8, offload=True),
              512, 50, 36_864, 512, 64 * 6 * 24, 200),
    # NovaSky-AI/SkyRL README at 9a4eac4d: "27hrs 8xH200" (8B), "20hrs 8xH200" (14B), "16hrs 8xH100" (7B);
    # examples/sky/swebench/run_SkyRL_agent_*.sh (the scripts' "default settings are meant for a 8xH200 node"; the
    # 7B ran on H100s, with settings the README does not give: the scripts' are used): 32 prompts x 8 trajectories (7B: 16 x 16), MAX_NUM_ITERS 25 (14B 35),
    # prompt 31,232 + response 1,536 tokens (14B 31,744 + 3,072), colocated rollouts at GPU_MEM_UTIL 0.8 with the
    # memory saver on, TP_SIZE 1 (14B 2), parameter and optimizer offload, a KL reference (use_kl_loss), 64 agents at
    # once (14B 192); 293 training tasks (7B: 220 in its second stage); total_epochs 100 is a cap, the steps run are
    # not published. The 14B trains a critic too (PPO with GAE), which the plan does not count.
    Published("SkyRL-Agent-8B-v0 (Qwen3-8B)", "NovaSky-AI/SkyRL examples/sky/swebench/run_SkyRL_agent_qwen8b_nt.sh",
              compute.MODELS["Qwen/Qwen3-8B"],
              Setup("full", "colocate", 0.8, 8, hint_teacher=True, gpu="H200", offload=True, sleep=True),
              256, 25, 32_768, 64, 8 * 27, None, 293 // 32),
    Published("SkyRL-Agent-14B-v0 (Qwen3-14B)", "NovaSky-AI/SkyRL examples/sky/swebench/run_SkyRL_agent_qwen14b_t.sh",
              compute.MODELS["Qwen/Qwen3-14B"],
              Setup("full", "colocate", 0.8, 8, hint_teacher=True, gpu="H200", tp=2, offload=True, sleep=True),
              256, 35, 34_816, 192, 8 * 20, None, 293 // 32),
    Published("SkyRL-Agent-7B-v0 (OpenHands-7B-Agent)", "NovaSky-AI/SkyRL examples/sky/swebench/run_SkyRL_agent_oh7b_s2.sh",
              QWEN25_CODER_7B, Setup("full", "colocate", 0.8, 8, hint_teacher=True, offload=True, sleep=True),
              256, 25, 32_768, 64, 8 * 16, None, 220 // 16),
)


def row(r: Published) -> dict:
    """The plan's figures for one published run: memory, a step by phase, and the ratio or the implied steps."""
    w = compute.workload({"student": r.run, "steps": 1, "prompts_per_step": r.rollouts_per_step, "generations": 1,
                          "max_completion_length": r.context, "max_tool_calling_iterations": r.max_turns})
    step = compute.gpu_hours(r.model, r.setup, steps=1, rollouts_per_step=r.rollouts_per_step,
                             tokens_per_rollout=w["tokens_per_rollout"], turns=w["turns"], graders=r.graders)
    out = {"run": r.run, "source": r.source, "fits": compute.memory_gb(r.model, r.setup, seq_tokens=r.context)["fits"],
           "published_gpu_hours": r.gpu_hours, "published_steps": r.steps,
           **{k: step[k] for k in ("generate_s", "tools_s", "grade_s", "train_s", "step_s")},
           "plan_gpu_hours_per_step": step["gpu_hours"]}
    if r.steps:
        out["plan_gpu_hours"] = r.steps * step["gpu_hours"]
        out["ratio"] = out["plan_gpu_hours"] / r.gpu_hours
    else:
        out["implied_steps"] = r.gpu_hours / step["gpu_hours"]
        out["implied_epochs"] = out["implied_steps"] / r.steps_per_epoch
    return out


def rows() -> list[dict]:
    return [row(r) for r in RUNS]


def table() -> list[str]:
    """Markdown lines of `rows`."""
    lines = ["| run | fits | plan: step s (generate + tools + grade + train) | published | plan |",
             "|---|---|---|---|---|"]
    for r in rows():
        plan = (f"{r['plan_gpu_hours']:,.0f} GPU-hours ({r['ratio']:.2f}x)" if "ratio" in r else
                f"{r['implied_steps']:.0f} steps in its GPU-hours ({r['implied_epochs']:.1f} epochs)")
        published = f"{r['published_gpu_hours']:,.0f} GPU-hours" + (
            f", {r['published_steps']} steps" if r["published_steps"] else ", steps not published")
        lines.append(f"| {r['run']} | {'yes' if r['fits'] else 'no'} | {r['step_s']:,.0f} ({r['generate_s']:,.0f} + "
                     f"{r['tools_s']:,.0f} + {r['grade_s']:,.0f} + {r['train_s']:,.0f}) | {published} | {plan} |")
    return lines
