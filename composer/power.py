"""What a live A/B design (spike 004) can detect and what it costs, before anyone pays for it.

    python -m composer plan                       # with the memory tables: the live 004 design's mde and dollars
    python -m composer plan --budget-usd 20000    # the design detecting the smallest B - A within $20,000

    from composer import power
    power.mde(seeds=3, tasks=103, samples=4)      # 0.06: the true B - A that 3 x 103 x 4 detects with 80 % power
    power.best(20_000)                            # {"mde": ..., "usd": ..., "seeds": ..., "pool": ..., ...}

ESTIMATES from stated assumptions (`Assumptions`, each changeable on the command line), never measurements. The
analysis is 004's (composer.ab: a crossed t interval over seeds x tasks, B - A per cell the mean over `samples`);
its variance components on the pass@1 difference of two checkpoints are taken as
- residual = discordance / samples: a cell's sampling noise, `discordance` being the share of tasks on which two
  single-sample runs of equally good checkpoints disagree (the variance of one sample's B - A);
- task = task_sd^2: how much the true B - A differs from task to task (a change helps some tasks, hurts others);
- seed = seed_sd^2: how much the true B - A differs from one training seed to the next;
and the mde is stats.t_detectable_effect at the design's crossed standard error (stats.crossed_standard_error:
the expected mean squares; these are the true components, so no c4 correction). Since task_sd^2 / tasks does not
shrink with seeds or samples, the test pool's size bounds what any budget can see (`floor`): at the defaults, no
number of seeds or samples detects 2 points of pass@1 on fewer than 444 test tasks, more than SWE-bench Lite has
(300; 004's test split 103).

Cost in dollars: the arms' training runs (composer.plan.gpu_hours of the setup, per arm and seed) and the
evaluations (every arm and seed, and the initial checkpoint, on tasks x samples episodes: generation at the
model's decoding rate on every GPU of the setup, grading in GRADERS containers at once, the GPUs held meanwhile),
GPU-hours times usd_per_gpu_hour. The training steps stay the profile's: they define the treatment, not the power.
"""

import itertools
import math
from dataclasses import asdict, dataclass

from composer import plan, stats

ARMS = ("A", "B", "control", "B+")  # what 004 trains per seed; the initial checkpoint is evaluated once more


@dataclass(frozen=True)
class Assumptions:
    # Two single runs of the same agent on SWE-bench Verified's 500 tasks differ in pass@1 by a standard deviation
    # over 1.5 points, even at temperature 0 ("On Randomness in Agentic Evals", arXiv 2602.07150, 60,000
    # trajectories, three models): a within-task variance of about 0.015^2 x 500 = 0.11 per run, 0.22 for the
    # difference of two runs' samples.
    discordance: float = 0.22
    # An assumption, not a measurement: the true per-task B - A spread with an SD of 15 points (an RL change that
    # moves one task in five by about 30 points, either way). The number that matters most: measure it (003/004's
    # offline runs give 0.1-0.2 on the zoo; a live pilot's per-task outcomes give it for real).
    task_sd: float = 0.15
    # An assumption: training seeds that move the true B - A by 1.5 points (SD), as an evaluation run does.
    seed_sd: float = 0.015
    # An assumption: on-demand H100 80 GB, per GPU-hour.
    usd_per_gpu_hour: float = 2.5


# Test pools: (tasks, where they come from, what 004 would train on beside them)
POOLS = {
    "lite:test": (103, "004's test split of SWE-bench Lite (data/swebench-lite/splits)", "lite:train (197)"),
    "lite": (300, "all of SWE-bench Lite's test split (SWE-bench/SWE-bench_Lite on Hugging Face)",
             "SWE-Gym (SWE-Gym/SWE-Gym on Hugging Face: 2,438 instances from 11 other repositories)"),
    "swe-bench:test": (2294, "SWE-bench's full test split (princeton-nlp/SWE-bench on Hugging Face)",
                       "SWE-Gym (its 11 repositories are not SWE-bench's 12)"),
}
SEEDS = range(2, 13)
SAMPLES = (1, 2, 4, 8)


def components(seeds: int, tasks: int, samples: int, assumptions: Assumptions = Assumptions()) -> dict:
    """The variance components of a design's cells of B - A (see the module doc), as stats.crossed_components
    gives them."""
    return {"seed": assumptions.seed_sd ** 2, "task": assumptions.task_sd ** 2,
            "residual": assumptions.discordance / samples, "seeds": seeds, "tasks": tasks}


def mde(seeds: int, tasks: int, samples: int, assumptions: Assumptions = Assumptions(), *, alpha: float = 0.05,
        power: float = 0.8) -> float:
    """The true B - A that a seeds x tasks x samples design detects (its interval above 0) with `power`."""
    if seeds < 2 or tasks < 2 or samples < 1:
        raise ValueError(f"a design needs >= 2 seeds, >= 2 tasks and >= 1 sample: got {seeds} x {tasks} x {samples}")
    se, df = stats.crossed_standard_error(components(seeds, tasks, samples, assumptions))
    return stats.t_detectable_effect(se, df, alpha=alpha, power=power)


def cost(values: dict, setup: plan.Setup, seeds: int, tasks: int, samples: int,
         assumptions: Assumptions = Assumptions()) -> dict:
    """GPU-hours and dollars of a design: `values` a live 004 profile's parameters (model, steps, workload)."""
    w = plan.workload(values)
    model = plan.MODELS[w["model"]]
    train = plan.gpu_hours(model, setup, steps=w["steps"], rollouts_per_step=w["rollouts_per_step"],
                           tokens_per_rollout=w["tokens_per_rollout"])["gpu_hours"] * len(ARMS) * seeds
    episodes = (len(ARMS) * seeds + 1) * tasks * samples
    generate_s = episodes * w["tokens_per_rollout"] / (model.gen_tokens_per_s * setup.gpus)
    grade_s = math.ceil(episodes / plan.GRADERS) * plan.GRADING_S
    evaluate = (generate_s + grade_s) / 3600 * setup.gpus
    return {"train_gpu_hours": train, "eval_gpu_hours": evaluate, "gpu_hours": train + evaluate,
            "usd": (train + evaluate) * assumptions.usd_per_gpu_hour}


def wall_hours(values: dict, nodes: int) -> float:
    """Hours from submission to the last result of the live profile's own design on `nodes` nodes of its setup's
    GPUs, one job per node (executor: slurm): the trainings in waves of `nodes`, then the evaluations in waves (the
    evaluations' GPU-hours shared evenly among them), with no time in the queue."""
    d = design(values)
    trainings, evaluations = len(ARMS) * d["seeds"], len(ARMS) * d["seeds"] + 1
    train_h = d["train_gpu_hours"] / trainings / d["gpus"]
    eval_h = d["eval_gpu_hours"] / evaluations / d["gpus"]
    return math.ceil(trainings / nodes) * train_h + math.ceil(evaluations / nodes) * eval_h


def fitting_setups(values: dict) -> list[plan.Setup]:
    """004's plan rows that its arms can run (full fine-tuning: they have no LoRA path yet, so the LoRA rows are the
    memory table's only) and whose memory fits (composer.plan), the profile's own vLLM mode first."""
    w = plan.workload(values)
    mode = values["trainer_config"].get("vllm_mode", "colocate") if values["trainer_config"].get("use_vllm") else "none"
    rows = [s for s in plan.SETUPS["004-ab-train-grpo-vs-trace-replay-dpo"] if s.mode == "full"
            and plan.memory_gb(plan.MODELS[w["model"]], s, seq_tokens=w["seq_tokens"])["fits"]]
    return sorted(rows, key=lambda s: s.vllm != mode)


def design(values: dict, assumptions: Assumptions = Assumptions()) -> dict:
    """The live profile's own design: its mde and its cost at its fitting setup."""
    seeds, samples = values["seeds"], values["eval_k"]
    pool = values["test_tasks"]
    tasks = values.get("n_test") or POOLS[pool][0]
    setup = fitting_setups(values)[0]
    return {"seeds": seeds, "tasks": tasks, "samples": samples, "pool": pool, "mode": setup.mode, "gpus": setup.gpus,
            "vllm": setup.vllm, "steps": values["steps"], "mde": mde(seeds, tasks, samples, assumptions),
            **cost(values, setup, seeds, tasks, samples, assumptions)}


def best(budget_usd: float, values: dict, assumptions: Assumptions = Assumptions(), *,
         effect: float | None = None) -> dict | None:
    """The design within budget_usd that detects the smallest B - A (ties: the cheaper), over fitting setups,
    test pools (all of a pool's tasks), seeds (SEEDS) and samples per task (SAMPLES); None when no design fits the
    budget. With
    `effect`, also the cheapest design that detects it (`cheapest_for_effect`, None if none in the grid does)."""
    if not budget_usd > 0:
        raise ValueError(f"budget_usd must be > 0, got {budget_usd!r}")  # math.inf: no budget
    found, cheapest = None, None
    for setup, (pool, (tasks, _, _)), seeds, samples in itertools.product(
            fitting_setups(values), POOLS.items(), SEEDS, SAMPLES):
        d = {"seeds": seeds, "tasks": tasks, "samples": samples, "pool": pool, "mode": setup.mode,
             "gpus": setup.gpus, "vllm": setup.vllm, "steps": values["steps"],
             "mde": mde(seeds, tasks, samples, assumptions), **cost(values, setup, seeds, tasks, samples, assumptions)}
        if d["usd"] <= budget_usd and (found is None or (d["mde"], d["usd"]) < (found["mde"], found["usd"])):
            found = d
        if effect is not None and d["mde"] <= effect and (cheapest is None or d["usd"] < cheapest["usd"]):
            cheapest = d
    if found is not None and effect is not None:
        found = {**found, "cheapest_for_effect": cheapest}
    return found


def floor(tasks: int, assumptions: Assumptions = Assumptions(), *, alpha: float = 0.05, power: float = 0.8) -> float:
    """The mde no number of seeds or samples gets under on `tasks` test tasks: the task term's alone."""
    return stats.t_detectable_effect(assumptions.task_sd / math.sqrt(tasks), tasks - 1, alpha=alpha, power=power)


def lines(values: dict, assumptions: Assumptions = Assumptions()) -> list[str]:
    """The power block of the live 004 header (comment lines)."""
    d = design(values, assumptions)
    a = asdict(assumptions)
    out = [f"# Power (composer/power.py, ESTIMATES from: discordance {a['discordance']}, task_sd {a['task_sd']}, "
           f"seed_sd {a['seed_sd']}, ${a['usd_per_gpu_hour']}/GPU-hour):",
           f"# this design, {d['seeds']} seeds x {d['tasks']} tasks ({d['pool']}) x {d['samples']} samples, detects "
           f"B - A >= {d['mde']:.3f} with 80 % power; {d['gpu_hours']:,.0f} GPU-hours "
           f"(train {d['train_gpu_hours']:,.0f}, evaluate {d['eval_gpu_hours']:,.0f}) = ${d['usd']:,.0f} "
           f"for {len(ARMS)} arms.",
           "# No number of seeds or samples gets under a pool's task term: "
           + ", ".join(f"{pool} ({n} tasks) >= {floor(n, assumptions):.3f}" for pool, (n, _, _) in POOLS.items())
           + "."]
    jobs = len(ARMS) * values["seeds"]
    out.append("# Wall time on a cluster (executor: slurm, one job per node, no queueing): "
               + ", ".join(f"{n} node{'s' if n > 1 else ''} {wall_hours(values, n):,.0f} h"
                           for n in sorted({1, 2, jobs // 2, jobs})) + f" ({jobs} trainings, {jobs + 1} evaluations).")
    cheapest = best(math.inf, values, assumptions, effect=0.02)["cheapest_for_effect"]
    lite = min(floor(n, assumptions) for pool, (n, _, _) in POOLS.items() if pool.startswith("lite"))
    out.append(f"# So 2 points of pass@1 is {'not ' if lite > 0.02 else ''}detectable on SWE-bench Lite at any budget"
               + (f"; {cheapest['pool']} ({cheapest['tasks']} tasks, {POOLS[cheapest['pool']][1]}; train on "
                  f"{POOLS[cheapest['pool']][2]}) detects it at {cheapest['seeds']} seeds x {cheapest['samples']} "
                  f"samples for ${cheapest['usd']:,.0f}" if cheapest else "; no pool in composer/power.py would")
               + ". `python -m composer plan --budget-usd X` prints the best design within X dollars.")
    return out
