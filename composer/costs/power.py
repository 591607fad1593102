"""What a live A/B design (spike 004) can detect and what it costs, before anyone pays for it.

    python -m composer plan                       # with the memory tables: the live 004 design's mde and dollars
    python -m composer plan --budget-usd 5000     # the design detecting the smallest B - A within $5,000

    from composer.costs import power
    power.mde(seeds=3, tasks=103, samples=4)      # the true B - A that 3 x 103 x 4 detects with 80 % power
    power.search(5_000, values)                   # {"best": ..., "best_same_treatment": ..., "cheapest": ...}

ESTIMATES from stated assumptions (`Assumptions`, each changeable on the command line), never measurements. The
analysis is 004's (composer.ab.analysis: a crossed t interval over seeds x tasks, B - A per cell the mean over `samples`);
its variance components on the pass@1 difference of two checkpoints are stated with no effect, at the student's base
rate p (`at_base_rate`; with none known, the rate at which `discordance` is 2 p (1 - p), `Assumptions.rate`):
- residual = discordance / samples: a cell's sampling noise. `discordance` is the share of tasks on which two
  single-sample runs of equally good checkpoints disagree, 2 p (1 - p) when every task is at p;
- task = (task_sd_logit x p (1 - p))^2: how much the true B - A differs from task to task (a change helps some tasks,
  hurts others), an SD on the logit scale reaching pass@1 through its slope p (1 - p);
- seed = (seed_sd_logit x p (1 - p))^2: how much the true B - A differs from one training seed to the next;
and taken at an effect by the rule 004's own analysis uses after the run (`components_at`: each arm's share of the
residual grows with its binomial variance, of the task and seed terms with its squared slope, as B moves from p to
p + effect), so that the mde planned and the mde reported are one quantity (tests/test_costs_power.py, two generative
models: within 1.2x at a 20 % base rate; at 5 % 004's reported mde, convex in its estimates, averages 1.3x). The mde is the effect at which the design's crossed t interval is above 0 with 80 % power,
the variance taken at that effect (stats.crossed_detectable_effect_at; these are the true components, so no c4
correction): the variance with no effect promised 80 % power where 66 % held. Since the task term does not shrink
with seeds or samples, the test pool's size bounds what any budget can see (`floor`).

Cost in dollars: the arms' training runs (composer.costs.compute.gpu_hours of the setup, per arm and seed: A without the
trace-replay channel, B, the control and B+ with it) and the evaluations (every arm and seed, and the initial
checkpoint, on tasks x samples episodes: composer.costs.compute.evaluation_gpu_hours), GPU-hours times the price of the
layout's GPU (usd_per_h100_hour, usd_per_h200_hour). Each treatment is priced at its cheapest layout (`layout`) among
the ones whose memory check passes (`layouts`: H100 or H200 nodes, vLLM colocated or served, tensor-parallel engines,
CPU offload); a layout that does not fit is never priced.
`search` also varies what the arms are trained as (`Treatment`: the student, full or LoRA fine-tuning, steps,
rollouts per step, turns and context) and how many arms there are (A and B only, or 004's four): a smaller student
or fewer steps is a different, cheaper experiment, not the same one, and the output says so.
"""

import functools
import itertools
import math
import shlex
from dataclasses import asdict, dataclass, replace

import yaml

from composer import stats
from composer.costs import compute
from composer.paths import ROOT

ARMS = ("A", "B", "control", "B+")  # what 004 trains per seed; the initial checkpoint is evaluated once more
ARM_SETS = (("A", "B"), ARMS)  # a design's arms: the treatment against the baseline alone, or with 004's controls


@dataclass(frozen=True)
class Assumptions:
    # Two single runs of the same agent on SWE-bench Verified's 500 tasks differ in pass@1 by a standard deviation
    # over 1.5 points, even at temperature 0 ("On Randomness in Agentic Evals", arXiv 2602.07150, 60,000
    # trajectories, three models): a within-task variance of about 0.015^2 x 500 = 0.11 per run, 0.22 for the
    # difference of two runs' samples.
    discordance: float = 0.22
    # An assumption, not a measurement: the true per-task B - A spread, an SD on the logit scale (pass@1 moves by it
    # times p (1 - p)). 003/004's offline runs gave 0.1-0.2 on pass@1 at the zoo's 25-40 % (slope 0.19-0.24): 0.5-0.85
    # here. The number that matters most: a live A/B's per-task outcomes measure it for real.
    task_sd_logit: float = 0.7
    # An assumption: training seeds that move the true B - A by 1.5 points (SD) at pass@1 30 %, as an evaluation run
    # does.
    seed_sd_logit: float = 0.07
    # Assumptions: on-demand cloud prices per GPU-hour of an H100 SXM 80 GB and an H200 SXM 141 GB (late-2025
    # list prices run ~$2-3 and ~$3-4); a design is priced at its layout's GPU.
    usd_per_h100_hour: float = 2.5
    usd_per_h200_hour: float = 3.5

    # The student's pass@1 the variance is stated at (at_base_rate sets it, with the discordance 2 p (1 - p) there; a
    # pilot's measured one, plan --from-pilot); None: the rate at which every task at p gives `discordance`.
    pass_at_1: float | None = None

    @property
    def rate(self) -> float:
        """The base rate the variance is stated at, strictly between 0 and 1: at a rate of 0 or 1 two runs cannot
        differ, and there is no variance to plan a design from (the plan refuses such a student: HEADROOM_FLOOR)."""
        if self.pass_at_1 is None and not 0 < self.discordance <= 0.5:
            raise ValueError(f"discordance must be in (0, 0.5] (2 p (1 - p) of a base rate p), got {self.discordance}")
        rate = (1 - math.sqrt(1 - 2 * self.discordance)) / 2 if self.pass_at_1 is None else self.pass_at_1
        if not 0 < rate < 1:
            raise ValueError(f"a base rate must be strictly between 0 and 1 to plan from, got {rate}")
        return rate

    def usd_per_hour(self, gpu: str) -> float:
        return {"H100": self.usd_per_h100_hour, "H200": self.usd_per_h200_hour}[gpu]


# Test pools: {name: (tasks, where they come from, what 004 would train on beside them)}. Only tasks whose tests
# pytest runs: on the others (django, sympy, sphinx) grading's layers but the tampering scan do not run, so 004 refuses
# them (composer.env.real.container.scan_only_refusal) and a plan that priced them would recommend what cannot run.
# Counted from the shipped indexes (SWE-bench's full split: from its count by repository).
@functools.cache
def named_pools() -> dict[str, tuple[int, str, str]]:
    from composer.env.real import swebench  # imported when a plan is made, not with composer.ab.analysis

    lite, verified = swebench.index("lite"), swebench.index("verified")
    full = sum(n for repo, n in swebench.TEST_SPLIT_REPOSITORIES.items() if swebench.pytest_repository(repo))
    gym = "SWE-Gym (SWE-Gym/SWE-Gym on Hugging Face: 2,438 instances from 11 other repositories)"
    return {
        "lite:test:pytest": (len(swebench.LITE_SOURCES["lite:test:pytest"]()), "004's test split of SWE-bench Lite "
                             "(data/swebench-lite/splits), its tasks whose tests pytest runs",
                             f"lite:train:pytest ({len(swebench.LITE_SOURCES['lite:train:pytest']())})"),
        "lite:pytest": (len(swebench.graded_by_pytest(lite)), "SWE-bench Lite's test split (SWE-bench/SWE-bench_Lite),"
                        " its tasks whose tests pytest runs", gym),
        "verified:pytest": (len(swebench.graded_by_pytest(verified)), "SWE-bench Verified (princeton-nlp/SWE-bench_"
                            "Verified; the published base rates' pool), its tasks whose tests pytest runs", gym),
        "swe-bench:test:pytest": (full, "SWE-bench's full test split (princeton-nlp/SWE-bench), its tasks whose tests "
                                  "pytest runs", gym),
    }


# A student's base rate bounds the effect it can show: published pass@1 on SWE-bench Verified before RL (the runs
# named; the after-RL figure says the student can move). A student with none known is planned only after a pilot has
# measured it (`composer pilot`, `plan --from-pilot`); one below HEADROOM_FLOOR is refused (analysis.read_with_headroom
# reads its INVALIDATED as INCONCLUSIVE: it could not have shown a 2-point effect failing).
BASE_RATES = {
    "Qwen/Qwen3-8B": (0.036, "published: SWE-bench Verified, no thinking, before RL (SkyRL-v0: 9.4 % after)"),
    "Qwen/Qwen3-14B": (0.18, "published: SWE-bench Verified, thinking, before RL (21.6 % after)"),
    "Qwen/Qwen3-32B": (0.23, "published: SWE-bench Verified, before RL (DeepSWE: 42 % after 200 steps)"),
}
# Published RL runs move students from 3.6 % (Qwen3-8B, no thinking: to 9.4 %), 18 % (Qwen3-14B, thinking: to 21.6 %)
# and 23 % (Qwen3-32B: to 42 %); a 2-point effect of a channel on top of RL is a fraction of such a move, and below
# 5 % there is little of it to take a fraction of.
HEADROOM_FLOOR = 0.05
SEEDS = range(2, 13)
SAMPLES = (1, 2, 4, 8)
# What the search varies of the treatment: Qwen3 students (composer.costs.compute.MODELS), fine-tuning, optimizer steps,
# rollouts per step (multiples of 7, which the layouts' 1, 2, 4 or 7 training processes share out evenly; 8 do only
# 56 and 112: a layout that cannot split a treatment's rollouts is not priced for it), (turns, tokens) budgets
STUDENTS = ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B")
# 004's arms and 002a's collection fine-tune fully (no peft_config anywhere): a LoRA design would not run, so the
# search prices none (compute.py's memory table still shows LoRA rows).
MODES = ("full",)
STEPS = (25, 50, 100)
ROLLOUTS = (28, 56, 112)
BUDGETS = ((15, 16384), (30, 32768))
# The node layouts the search prices, each one the code launches: TRL's colocate mode on every GPU of the launcher's
# processes (vllm_gpu_memory_utilization, vllm_tensor_parallel_size), or composer.vllm_server (TRL's vllm-serve) on
# GPUs of its own (--data_parallel_size engines of --tensor_parallel_size GPUs) beside them; FSDP2's CPU offload
# (accelerate's fsdp_offload_params) or not; H100 or H200 nodes of 1 to 8 GPUs. Not priced: sequence parallelism and
# TRL's vllm_enable_sleep_mode (004's arms do not set them), LoRA (MODES).
GPU_KINDS = ("H100", "H200")
NODE_GPUS = (1, 2, 4, 8)
COLOCATE_FRACTIONS = (0.3, 0.4, 0.5, 0.6)
SERVER_GPUS = (1, 2, 4)
TENSOR_PARALLEL = (1, 2, 4)


@dataclass(frozen=True)
class Treatment:
    """What the arms are trained as: changing any of it changes the experiment, not only its cost."""
    student: str
    mode: str  # "full" | "lora"
    steps: int
    rollouts_per_step: int
    max_turns: int
    max_tokens: int

    def __str__(self) -> str:
        return (f"{self.student} {self.mode}, {self.steps} steps x {self.rollouts_per_step} rollouts, "
                f"{self.max_turns} turns / {self.max_tokens} tokens")

    def workload(self) -> dict:
        return compute.workload({"student": self.student, "steps": self.steps, "generations": 1,
                                 "prompts_per_step": self.rollouts_per_step, "max_completion_length": self.max_tokens,
                                 "max_tool_calling_iterations": self.max_turns, "env_max_steps": self.max_turns})


def treatment(values: dict) -> Treatment:
    """The live 004 profile's treatment (its arms fine-tune fully: they have no LoRA path yet)."""
    w = compute.workload(values)
    compute.model(w["model"])
    return Treatment(w["model"], "full", w["steps"], w["rollouts_per_step"], w["max_turns"], w["seq_tokens"])


def _bernoulli(p: float) -> float:
    p = min(max(p, 0.0), 1.0)
    return p * (1 - p)


def components_at(components: dict, effect: float, pass_a: float, pass_b: float) -> dict:
    """B - A's variance components (stats.crossed_components) at a true difference `effect`, from those observed
    (or stated) with the arms at pass@1 pass_a and pass_b: the one rule the plan (`components`) and 004's analysis
    after the run (composer.ab.analysis.difference) both take the variance at the effect by. Each arm's share of a
    component is taken as proportional to its own variance at its rate, the same for both arms when observed: p(1 - p) for the
    sampling residual (binomial), its square for the seed and task terms (a training seed's or a task's effect on the
    logit scale reaches pass@1 through the slope p(1 - p)). At the effect the arms are at pass_a and pass_a + effect,
    so each component is multiplied by w(pass_a) + w(pass_a + effect) over w(pass_a) + w(pass_b); never by less than
    1 (the variance is not taken to fall with the effect, as it would past a rate of 1/2)."""
    def grow(w) -> float:
        observed = w(pass_a) + w(pass_b)
        return max(1.0, (w(pass_a) + w(pass_a + effect)) / observed) if observed > 0 else 1.0

    residual, factor = grow(_bernoulli), grow(lambda p: _bernoulli(p) ** 2)
    out = {**components, "residual": components["residual"] * residual,
           **{k: components[k] * factor for k in ("seed", "task") if components[k] is not None}}
    extra = components["residual"] * (residual - 1)  # each mean square holds the residual once, and its factor's term
    if "ms_seed" in components:
        out["ms_seed"] = components["ms_seed"] + extra + components["tasks"] * components["seed"] * (factor - 1)
        out["ms_task"] = components["ms_task"] + extra + components["seeds"] * components["task"] * (factor - 1)
    return out


def components(seeds: int, tasks: int, samples: int, assumptions: Assumptions = Assumptions(), *,
               effect: float = 0.0) -> dict:
    """The variance components of a design's cells of B - A at a true B - A of `effect` (see the module doc), as
    stats.crossed_components gives them: stated at the base rate, taken at the effect by `components_at`."""
    rate = assumptions.rate
    slope = _bernoulli(rate)
    stated = {"seed": (assumptions.seed_sd_logit * slope) ** 2, "task": (assumptions.task_sd_logit * slope) ** 2,
              "residual": assumptions.discordance / samples, "seeds": seeds, "tasks": tasks}
    return components_at(stated, max(effect, 0.0), rate, rate)


@functools.lru_cache(maxsize=4096)
def mde(seeds: int, tasks: int, samples: int, assumptions: Assumptions = Assumptions(), *, alpha: float = 0.05,
        power: float = 0.8) -> float:
    """The true B - A that a seeds x tasks x samples design detects (its interval above 0) with `power`, the
    variance taken at that B - A."""
    if seeds < 2 or tasks < 2 or samples < 1:
        raise ValueError(f"a design needs >= 2 seeds, >= 2 tasks and >= 1 sample: got {seeds} x {tasks} x {samples}")
    return stats.crossed_detectable_effect_at(lambda e: components(seeds, tasks, samples, assumptions, effect=e),
                                              alpha=alpha, power=power, estimated=False)


def floor(tasks: int, assumptions: Assumptions = Assumptions(), *, alpha: float = 0.05, power: float = 0.8) -> float:
    """The mde no number of seeds or samples gets under on `tasks` test tasks: the task term's alone (at the effect,
    as `components` takes it)."""
    return stats.crossed_detectable_effect_at(
        lambda e: {**components(2, tasks, 1, assumptions, effect=e), "seed": 0.0, "residual": 0.0},
        alpha=alpha, power=power, estimated=False)


def candidate_layouts(mode: str) -> list[compute.Setup]:
    """Every layout of the grid above for arm B (one DPO pair per micro-batch), fitting or not."""
    rows = []
    for gpu, gpus, tp, offload in itertools.product(GPU_KINDS, NODE_GPUS, TENSOR_PARALLEL, (False, True)):
        at = dict(dpo_pairs=1, gpu=gpu, tp=tp, offload=offload)
        if gpus % tp == 0:
            rows += [compute.Setup(mode, "colocate", f, gpus, **at) for f in COLOCATE_FRACTIONS]
        rows += [compute.Setup(mode, "server", 0, gpus, server_gpus=k, **at) for k in SERVER_GPUS
                 if k < gpus and k % tp == 0]
    return rows


def layouts(t: Treatment) -> list[compute.Setup]:
    """The layouts (candidate_layouts) whose memory holds the treatment's arm B and whose training processes split
    its rollouts evenly: the only ones ever priced."""
    model = compute.model(t.student)
    return [s for s in candidate_layouts(t.mode) if t.rollouts_per_step % s.training_gpus == 0
            and compute.memory_gb(model, s, seq_tokens=t.max_tokens)["fits"]]


def layout(t: Treatment, assumptions: Assumptions = Assumptions(), concurrent_tools: bool = True
           ) -> compute.Setup | None:
    """The cheapest layout, in dollars, of the treatment's A and B trainings (None when none fits)."""
    def usd(setup):
        run = runs(t, setup, concurrent_tools)
        return (run["A"] + run["B"]) * assumptions.usd_per_hour(setup.gpu)

    fitting = layouts(t)
    return min(fitting, key=usd) if fitting else None


def runs(t: Treatment, setup: compute.Setup, concurrent_tools: bool = True) -> dict:
    """GPU-hours of one training run of arm A (no trace-replay channel) and of arm B (the setup's DPO pairs), and B's
    hours."""
    a = _step(t.student, t.rollouts_per_step, t.max_turns, t.max_tokens, replace(setup, dpo_pairs=0),
              concurrent_tools)
    b = _step(t.student, t.rollouts_per_step, t.max_turns, t.max_tokens, setup, concurrent_tools)
    return {"A": t.steps * a["gpu_hours"], "B": t.steps * b["gpu_hours"], "hours": t.steps * b["hours"]}


@functools.lru_cache(maxsize=None)
def _step(student: str, rollouts: int, max_turns: int, max_tokens: int, setup: compute.Setup,
          concurrent_tools: bool) -> dict:
    """One optimizer step's compute.gpu_hours (the search prices thousands of layouts, each at three step counts)."""
    w = Treatment(student, setup.mode, 1, rollouts, max_turns, max_tokens).workload()
    return compute.gpu_hours(compute.model(student), setup, steps=1, rollouts_per_step=rollouts,
                             tokens_per_rollout=w["tokens_per_rollout"], turns=w["turns"],
                             concurrent_tools=concurrent_tools)


def evaluation(t: Treatment, setup: compute.Setup, episodes: int) -> float:
    """GPU-hours of evaluating one checkpoint of the treatment on `episodes` episodes (what matters of it: the
    student, its turn and token budgets, the node's GPUs)."""
    return _evaluation(t.student, t.max_turns, t.max_tokens, replace(setup, mode="full", dpo_pairs=0), episodes)


@functools.lru_cache(maxsize=4096)
def _evaluation(student: str, max_turns: int, max_tokens: int, setup: compute.Setup, episodes: int) -> float:
    w = Treatment(student, "full", 1, 1, max_turns, max_tokens).workload()
    return compute.evaluation_gpu_hours(compute.model(student), setup, episodes=episodes,
                                        tokens_per_rollout=w["tokens_per_rollout"], turns=w["turns"])


def cost(t: Treatment, setup: compute.Setup, seeds: int, tasks: int, samples: int,
         assumptions: Assumptions = Assumptions(), *, arms: tuple = ARMS, concurrent_tools: bool = True,
         checkpoints: int = 0) -> dict:
    """GPU-hours and dollars of a design: every arm's training run per seed, and the evaluations (with
    `checkpoints`, nested doses: each training evaluated that many more times, at checkpoints before its last step)."""
    run = runs(t, setup, concurrent_tools)
    train = seeds * (run["A"] + (len(arms) - 1) * run["B"])
    evaluate = evaluations(arms, seeds, checkpoints) * evaluation(t, setup, tasks * samples)
    return {"train_gpu_hours": train, "eval_gpu_hours": evaluate, "gpu_hours": train + evaluate,
            "usd": (train + evaluate) * assumptions.usd_per_hour(setup.gpu)}


def evaluations(arms: tuple, seeds: int, checkpoints: int = 0) -> int:
    """How many checkpoints a design evaluates: every arm's per seed (and its nested doses'), and the initial one."""
    return len(arms) * seeds * (1 + checkpoints) + 1


def _design(t, setup, arms, pool, tasks, seeds, samples, assumptions, concurrent_tools, checkpoints=0) -> dict:
    return {**asdict(t), "arms": list(arms), **layout_fields(setup), "seeds": seeds, "tasks": tasks, "pool": pool,
            "samples": samples, "checkpoints": checkpoints, "mde": mde(seeds, tasks, samples, assumptions),
            **cost(t, setup, seeds, tasks, samples, assumptions, arms=arms, concurrent_tools=concurrent_tools,
                   checkpoints=checkpoints)}


def layout_fields(setup: compute.Setup) -> dict:
    """What a design records of its layout."""
    return {k: getattr(setup, k) for k in ("gpu", "gpus", "vllm", "vllm_fraction", "server_gpus", "tp", "offload")}


def live_setup(values: dict) -> compute.Setup:
    """The layout a live 004 profile runs (arm B's, one DPO pair per micro-batch): its node's GPUs from
    slurm.gpus_per_node (SLURM's typed form "h200:8" names the kind; a bare count means H100s), vLLM's mode and
    share from trainer_config, a server's engines from the launcher's composer.vllm_server flags
    (--data_parallel_size, --tensor_parallel_size) and offload from its accelerate config (fsdp_offload_params)."""
    config, launcher = values["trainer_config"], shlex.split(values.get("launcher") or "")
    kind, _, count = str((values.get("slurm") or {}).get("gpus_per_node") or "").rpartition(":")
    if not count.isdigit() or kind.upper() not in ("", *compute.GPUS):
        raise ValueError(f"slurm.gpus_per_node {values.get('slurm', {}).get('gpus_per_node')!r}: the node's GPUs, "
                         f"e.g. 8 (H100s) or 'h200:8' (SLURM's typed form; kinds {', '.join(compute.GPUS)})")
    mode = config.get("vllm_mode", "colocate") if config.get("use_vllm") else "none"
    at = dict(dpo_pairs=1, gpu=kind.upper() or "H100", offload=_offloads(launcher))
    if mode == "server":
        server = shlex.split(launcher[1]) if launcher[:1] == ["scripts/with-server.sh"] else []
        dp, tp = (int(_flag(server, name, 1)) for name in ("data_parallel_size", "tensor_parallel_size"))
        return compute.Setup("full", "server", 0, int(count), server_gpus=dp * tp, tp=tp, **at)
    return compute.Setup("full", mode, config.get("vllm_gpu_memory_utilization", 0.3) if mode == "colocate" else 0,
                         int(count), tp=config.get("vllm_tensor_parallel_size", 1), **at)


def _flag(argv: list[str], name: str, default):
    """A command line's --name value (TRL's underscores or vLLM's dashes), or `default`."""
    for spelling in (name, name.replace("_", "-")):
        if f"--{spelling}" in argv:
            return argv[argv.index(f"--{spelling}") + 1]
    return default


def _offloads(launcher: list[str]) -> bool:
    """Whether an accelerate launch offloads: its --fsdp_offload_params flag, or its --config_file's."""
    flag = _flag(launcher, "fsdp_offload_params", None)
    if flag is not None:
        return flag.lower() == "true"
    path = _flag(launcher, "config_file", None)
    if path is None:
        return False
    config = yaml.safe_load((ROOT / path).read_text())
    return bool((config.get("fsdp_config") or {}).get("fsdp_offload_params"))


def design(values: dict, assumptions: Assumptions = Assumptions(), *, concurrent_tools: bool = True,
           base_rate: float | None = None) -> dict:
    """The live profile's own design: its treatment, arms, seeds, pool, samples and nested doses (`checkpoints`) at
    its layout; its mde at the student's base rate when one is given (at_base_rate), else at the assumed
    discordance."""
    pool = values["test_tasks"]
    tasks = values.get("n_test") or named_pools()[pool][0]
    used = assumptions if base_rate is None else at_base_rate(assumptions, base_rate)
    return _design(treatment(values), live_setup(values), tuple(values.get("arms") or ARMS), pool, tasks,
                   values["seeds"], values["eval_k"], used, concurrent_tools, len(values.get("checkpoints") or ()))


def wall_hours(values: dict, nodes: int) -> float:
    """Hours from submission to the last result of the live profile's own design on `nodes` nodes of its setup's
    GPUs, one job per node (executor: slurm): the trainings in waves of `nodes`, then the evaluations in waves (the
    evaluations' GPU-hours shared evenly among them), with no time in the queue."""
    d = design(values)
    trainings, evaluated = len(d["arms"]) * d["seeds"], evaluations(d["arms"], d["seeds"], d["checkpoints"])
    train_h = d["train_gpu_hours"] / trainings / d["gpus"]
    eval_h = d["eval_gpu_hours"] / evaluated / d["gpus"]
    return math.ceil(trainings / nodes) * train_h + math.ceil(evaluated / nodes) * eval_h


def search(budget_usd: float, values: dict, assumptions: Assumptions = Assumptions(), *, effect: float | None = None,
           pools: dict | None = None, students=STUDENTS, concurrent_tools: bool = True,
           base_rates: dict | None = None) -> dict:
    """Designs over treatments (`students` x MODES x STEPS x ROLLOUTS x BUDGETS, and the live profile's own; each at
    its cheapest fitting layout), ARM_SETS, test pools (all of a pool's tasks; default named_pools()), SEEDS and SAMPLES:
    - best: the smallest mde within budget_usd (ties: the cheaper); None when nothing fits the budget;
    - cheapest: the cheapest design (what the budget would have to be);
    - cheapest_for_effect: with `effect`, the cheapest design whose mde <= effect (None if none does);
    each also `..._same_treatment`, among the designs that train the live profile's treatment;
    - live: the live profile's own design (`design`);
    - refused: {student: why} for the students not planned for (`refusal`: base rate unknown or below the floor;
      `base_rates` {student: (pass@1, source)} adds measured ones to BASE_RATES), and base_rates: those used.
    A design's mde is at its student's base rate (`at_base_rate`)."""
    if not budget_usd > 0:
        raise ValueError(f"budget_usd must be > 0, got {budget_usd!r}")  # math.inf: no budget
    if effect is not None and not effect > 0:
        raise ValueError(f"effect must be > 0, got {effect!r}")
    own = treatment(values)
    pools = named_pools() if pools is None else pools
    for name in students:
        compute.model(name)  # an unknown student is refused before the search
    rates = {**BASE_RATES, **(base_rates or {})}
    refused = {name: why for name in (*students, own.student) if (why := refusal(name, rates))}
    treatments = {Treatment(s, m, n, r, turns, tokens) for s, m, n, r, (turns, tokens) in
                  itertools.product(students, MODES, STEPS, ROLLOUTS, BUDGETS)} | {own}
    treatments = {t for t in treatments if t.student not in refused}
    found = {}  # name -> (rank, the design's arguments): the search visits tens of thousands of designs

    def consider(name, rank, args):
        if name not in found or rank < found[name][0]:
            found[name] = (rank, args)

    for t in sorted(treatments, key=str):
        setup = layout(t, assumptions, concurrent_tools)
        if setup is None:
            continue
        run = runs(t, setup, concurrent_tools)
        at = at_base_rate(assumptions, rates[t.student][0])
        suffixes = ("", "_same_treatment") if t == own else ("",)
        for arms, (pool, (tasks, *_)), samples in itertools.product(ARM_SETS, pools.items(), SAMPLES):
            checkpoint = evaluation(t, setup, tasks * samples)
            for seeds in SEEDS:  # cost()'s sums, inline
                usd = (seeds * (run["A"] + (len(arms) - 1) * run["B"]) + (len(arms) * seeds + 1) * checkpoint
                       ) * assumptions.usd_per_hour(setup.gpu)
                m, args = mde(seeds, tasks, samples, at), (t, setup, arms, pool, tasks, seeds, samples)
                for suffix in suffixes:
                    consider("cheapest" + suffix, usd, args)
                    if usd <= budget_usd:
                        consider("best" + suffix, (m, usd), args)
                    if effect is not None and m <= effect:
                        consider("cheapest_for_effect" + suffix, usd, args)
    names = [n + suffix for n in ("best", "cheapest", "cheapest_for_effect") for suffix in ("", "_same_treatment")]
    own_rate = rates.get(own.student, (None,))[0]  # the live design at it, where one can plan from it (0 < p < 1)
    return {**{key: _design(*found[key][1], at_base_rate(assumptions, rates[found[key][1][0].student][0]),
                            concurrent_tools) if key in found else None for key in names},
            "live": design(values, assumptions, concurrent_tools=concurrent_tools,
                           base_rate=own_rate if own_rate is not None and 0 < own_rate < 1 else None),
            "refused": refused,
            "base_rates": {name: {"pass_at_1": rates[name][0], "source": rates[name][1]}
                           for name in sorted({*students, own.student}) if name in rates}}


def refusal(student: str, rates: dict) -> str | None:
    """Why a student is not planned for (its base rate unknown, below HEADROOM_FLOOR or above 1 - HEADROOM_FLOOR), or
    None."""
    if student not in rates:
        return (f"{student.split('/')[-1]}: no base rate known; measure it first (python -m composer pilot, then "
                "plan --from-pilot)")
    rate, _ = rates[student]
    if rate < HEADROOM_FLOOR:
        return (f"{student.split('/')[-1]}: base rate {rate:.1%} < the {HEADROOM_FLOOR:.0%} floor (too little room "
                "to show a 2-point effect)")
    if rate > 1 - HEADROOM_FLOOR:
        return (f"{student.split('/')[-1]}: base rate {rate:.1%} > the {1 - HEADROOM_FLOOR:.0%} ceiling (too little "
                "room above it to show a 2-point effect)")
    return None


def at_base_rate(assumptions: Assumptions, rate: float) -> Assumptions:
    """The assumptions for a student at pass@1 `rate`: two runs of equally good checkpoints disagree on a task with
    probability 2 p (1 - p) when every task is at p (the most they can at that rate: tasks that differ disagree less),
    in place of the assumed discordance."""
    return replace(assumptions, discordance=2 * rate * (1 - rate), pass_at_1=rate)


def planned_mde(student: str, seeds: int, tasks: int, samples: int, assumptions: Assumptions = Assumptions()) -> float:
    """The mde the plan gives a design of `student` before it runs: at its published base rate (BASE_RATES) when
    one is known, as the live header's, else at the assumptions' discordance."""
    rate = BASE_RATES.get(student)
    return mde(seeds, tasks, samples, at_base_rate(assumptions, rate[0]) if rate else assumptions)


def describe(d: dict) -> str:
    """A design in one line: treatment, layout, arms, seeds x tasks x samples, mde, GPU-hours and dollars."""
    return (f"{d['student']} {d['mode']} ({describe_layout(d)}), {d['steps']} steps x {d['rollouts_per_step']} "
            f"rollouts, {d['max_turns']} turns / {d['max_tokens']} tokens, {len(d['arms'])} arms "
            f"({', '.join(d['arms'])}); {d['seeds']} seeds x {d['tasks']} tasks ({d['pool']}) x {d['samples']} "
            f"sample{'s' if d['samples'] > 1 else ''}"
            + (f", each training also evaluated at {d['checkpoints']} checkpoint{'s' if d['checkpoints'] > 1 else ''}"
               " (nested doses)" if d.get("checkpoints") else "")
            + f": mde {d['mde']:.3f}, {d['gpu_hours']:,.0f} GPU-hours, "
            f"${d['usd']:,.0f}")


def describe_layout(d) -> str:
    """A layout (a Setup or a design's layout_fields) in words: '8 x H200, vLLM colocated at 0.5'."""
    d = layout_fields(d) if isinstance(d, compute.Setup) else d
    tp = f", tensor parallel {d['tp']}" if d["tp"] > 1 else ""
    vllm = {"colocate": f"vLLM colocated at {d['vllm_fraction']}{tp}",
            "server": f"vLLM served on {d['server_gpus']} of them{tp}", "none": "no vLLM"}[d["vllm"]]
    return f"{d['gpus']} x {d['gpu']}, {vllm}" + (", FSDP2 CPU offload" if d["offload"] else "")


def lines(values: dict, assumptions: Assumptions = Assumptions()) -> list[str]:
    """The power block of the live 004 header (comment lines)."""
    rate = BASE_RATES.get(treatment(values).student)
    d = design(values, assumptions, base_rate=rate and rate[0])
    a = asdict(assumptions)
    at = (f"at the student's base rate {rate[0]:.1%} ({rate[1]}): discordance 2 p (1 - p) = "
          f"{at_base_rate(assumptions, rate[0]).discordance:.3f}" if rate else
          f"at the assumed discordance {a['discordance']} (no base rate known for the student: run the pilot)")
    out = [f"# Power (composer/costs/power.py, ESTIMATES from: task_sd_logit {a['task_sd_logit']}, seed_sd_logit "
           f"{a['seed_sd_logit']}, "
           f"${a['usd_per_h100_hour']}/H100-hour, ${a['usd_per_h200_hour']}/H200-hour; the variance at the effect), "
           f"{at}:",
           f"# this design, {d['seeds']} seeds x {d['tasks']} tasks ({d['pool']}) x {d['samples']} samples, detects "
           f"B - A >= {d['mde']:.3f} with 80 % power; {d['gpu_hours']:,.0f} GPU-hours "
           f"(train {d['train_gpu_hours']:,.0f}, evaluate {d['eval_gpu_hours']:,.0f}) = ${d['usd']:,.0f} "
           f"for {len(d['arms'])} arms.",
           "# No number of seeds or samples gets under a pool's task term: "
           + ", ".join(f"{pool} ({n} tasks) >= {floor(n, assumptions):.3f}"
                       for pool, (n, _, _) in named_pools().items()) + "."]
    jobs = len(d["arms"]) * values["seeds"]
    nested = f": each training's {d['checkpoints'] + 1} nested doses and the initial checkpoint" if d["checkpoints"] else ""
    out.append(f"# Wall time on a cluster (executor: slurm, one job per allocation of {d['gpus']} GPUs, no queueing): "
               + ", ".join(f"{n} allocation{'s' if n > 1 else ''} {wall_hours(values, n):,.0f} h"
                           for n in sorted({1, 2, jobs // 2, jobs}))
               + f" ({jobs} trainings, {evaluations(d['arms'], d['seeds'], d['checkpoints'])} evaluations{nested}).")
    found = search(math.inf, values, assumptions, effect=0.02, students=())
    cheapest, refused = found["cheapest_for_effect"], found["refused"].get(d["student"])
    lite = min(floor(n, assumptions) for pool, (n, _, _) in named_pools().items() if pool.startswith("lite"))
    out.append(f"# So 2 points of pass@1 is {'not ' if lite > 0.02 else ''}detectable on SWE-bench Lite's pytest tasks at any "
               "budget"
               + (f"; and the search plans nothing for this student: {refused}" if refused else
                  f"; the cheapest design that detects it: {describe(cheapest)} (train on "
                  f"{named_pools()[cheapest['pool']][2]})" if cheapest else
                  "; no pool in composer/costs/power.py would")
               + ". `python -m composer plan --budget-usd X` prints the best design within X dollars.")
    return out
