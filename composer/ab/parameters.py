"""Spike 004's parameters as one typed, frozen config: what the notebook, the profiles, the tests and `bench ab` build.

    from composer.ab.parameters import ABParameters
    p = ABParameters(student="zoo:report", seeds=6, steps=6, checkpoints=[2, 4])   # a bad value: ValueError naming it
    p = ABParameters.of(run.effective_parameters(SLUG, profile="report")[0])      # a profile's, from its values
    dataclasses.replace(p, arms={"A": {}})                                         # checked again

Each field's default, kind, allowed-values clause (composer.allowed) and help are the notebook's parameters cell's
(notebooks/004-*.ipynb, which papermill fills): tests/test_ab_parameters.py holds the two equal. What one field
alone cannot say is checked here too: the named arms among the arms, a planted start for the positive control
alone, TRL's tool loop above the environment's, doses or checkpoints, not both. composer.ab.preparation makes the
inputs from it, composer.ab.training the plan.

Imports composer.allowed only: every floor of composer/ab/ stands on it.
"""

import copy
import dataclasses
from dataclasses import dataclass, field

from composer.allowed import allows, fits

ARMS = {"A": {}, "B": {"trace_replay_weight": 0.5, "pairs": "pairs"},
        "control": {"trace_replay_weight": 0.5, "pairs": "shuffled"},
        "B+": {"trace_replay_weight": 0.5, "pairs": "expert"}}
STARTS = ("student", "planted")  # an arm's "start": the student, or composer.ab.planting's checkpoint of it


def _p(default, help: str, allowed: str | None = None):
    """A field with the notebook's default (a fresh deep copy of a dict or list for each config), help and clause."""
    metadata = {"help": help, "allowed": allowed}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class ABParameters:
    backend: str = _p("offline", "offline: the zoo student on embedded tasks, CPU | live: see "
                                 "params/live/004-ab-train-grpo-vs-trace-replay-dpo.yaml", allowed="offline | live")
    student: str = _p(
        "zoo:smoke", "zoo:<profile>: that zoo's student, its train split for GRPO and its test split for evaluation; "
        "or any Hugging Face model (name or folder), with train_tasks, test_tasks and max_new_tokens set")
    train_tasks: str = _p(
        "", "GRPO's tasks, a source composer.env.real.swebench.load_instances reads: \"lite:train:pytest\" (SWE-bench "
        "Lite's fixed split, its tasks whose tests pytest runs: every layer grades them; \"lite:train\": all, refused "
        "where only the scan grades), a .json/.jsonl of records (\"\": the zoo profile's train split)")
    test_tasks: str = _p(
        "", "held-out tasks, as train_tasks: \"lite:test:pytest\", a file (a pilot's within-reach.jsonl: the tasks the "
        "student solved at least once, which the verdict then says) (\"\": the zoo profile's test split)")
    pairs_dir: str = _p("", "003's out_dir with pairs/ and shuffled/ (report: runs/003-dpo-pairs-from-disagreement); "
                            "\"\" or missing: oracle pairs stand in")
    oracle_pairs: int = _p(2, "when 003's pairs are missing: oracle pairs made from this many train tasks",
                           allowed="at least 1")
    arms: dict = _p(ARMS, "name: ComposerConfig channel fields (+ \"pairs\": pairs | shuffled | expert; + \"start\": "
                          "student | planted, the checkpoint it trains from)", allowed="non-empty")
    reference: str = _p("A", "the arm B is judged against")
    treatment: str = _p("B", "the arm under test")
    control: str = _p("control", "shuffled-label arm reported beside the treatment (\"\": none)")
    positive_control_tasks: str = _p(
        "train", "where B+'s expert pairs come from: the train split (how far known-good pairs reach held-out tasks) "
        "or the evaluated test tasks (a planted effect the design must see, said in the report)",
        allowed="train | test")
    positive_control: str = _p("B+", "the arm with a known advantage (expert pairs, or \"start\": \"planted\"), which the "
                                     "design must detect before B is read (\"\": none)")
    plant_steps: int = _p(8, "an arm with \"start\": \"planted\" trains from the student after this many full-batch "
                             "steps on the expert's demonstrations of the evaluated test tasks (composer.ab.planting)",
                          allowed="at least 1")
    plant_learning_rate: float = _p(0.001, "those steps' (AdamW)", allowed="more than 0")
    seeds: int = _p(2, "training seeds per arm (checkpoint, task order, generation seeds are shared by all arms of a "
                       "seed)", allowed="at least 1")
    n_test: int = _p(0, "held-out test tasks evaluated (0: all of test_tasks)", allowed="at least 0")
    steps: int = _p(1, "GRPO optimizer steps per arm and seed", allowed="at least 1")
    prompts_per_step: int = _p(1, "tasks (GRPO groups) per step", allowed="at least 1")
    generations: int = _p(2, "rollouts per task (the GRPO group size)", allowed="at least 2")
    max_completion_length: int = _p(1024, "TRL's budget per rollout: generated tokens plus tool results",
                                    allowed="at least 1")
    max_tool_calling_iterations: int = _p(12, "TRL's tool-loop limit (keep it above env_max_steps)",
                                          allowed="at least 1")
    env_max_steps: int = _p(8, "the environment's tool-call limit per episode (training and evaluation)",
                            allowed="at least 1")
    temperature: float = _p(1.0, "GRPO's sampling temperature", allowed="at least 0")
    screen_tasks: int = _p(
        0, "train tasks whose success rate is measured first (generations rollouts each, at temperature): GRPO then "
        "trains only on those strictly between 0 and 1, the ones that give it a gradient (0: no screening)",
        allowed="at least 0")
    learning_rate: float = _p(1e-05, "GRPO's (AdamW), shared by every arm", allowed="more than 0")
    trainer_config: dict = _p({}, "extra GRPOConfig fields for every arm (live: vLLM, bf16, GPU)")
    doses: list = _p(
        [], "dose-response: overrides every arm gets alike (steps, prompts_per_step, learning_rate, trainer_config "
        "entries), lowest first; B is read at the first dose that detects the positive control ([]: one dose, the "
        "parameters above)")
    checkpoints: list = _p(
        [], "nested doses: optimizer steps before the last at which every arm's one training is also evaluated, "
        "lowest first; the dose-response reads them and the last as its doses, for the cost of evaluations only (set "
        "doses or checkpoints, not both)")
    eval_k: int = _p(1, "samples per test task (pass@1 per task: the mean of its samples)", allowed="at least 1")
    eval_temperature: float = _p(0.0, "0: greedy (eval_k > 1 then repeats the same rollout)", allowed="at least 0")
    max_new_tokens: int = _p(0, "tokens per turn in evaluation, screening and expert pairs (0: the zoo profile's)",
                             allowed="at least 0")
    min_effect: float = _p(0.02, "gate: B - A at least 2 points pass@1, with a CI above 0",
                           allowed="more than 0, less than 1")
    workers: int = _p(0, "jobs at once, each in a fresh process (0: in this process, one after another)",
                      allowed="at least 0")
    launcher: str = _p(
        "", "a command each train and eval job runs under (an evaluation: each process on its share of the test "
        "tasks), e.g. \"accelerate launch --config_file params/live/accelerate-fsdp2.yaml\" (GPUs) or \"torchrun "
        "--nproc-per-node 2\" (\"\": in-process or a worker)")
    executor: str = _p("local", "local: this machine (workers, launcher) | slurm: every job submitted to SLURM through "
                                "submitit (composer/ab/cluster.py), under launcher inside its allocation",
                       allowed="local | slurm")
    slurm: dict = _p({}, "executor slurm's settings: partition, account, nodes, gpus_per_node, cpus_per_task, mem_gb, "
                         "timeout_min, retries, poll_s (composer.ab.cluster.SETTINGS)")
    run_dir: str = _p("", "job folders, cached by configuration hash (\"\": a fresh temporary folder; report: "
                          "runs/004-...)")
    seed: int = _p(0, "evaluation sampling seeds, controls, bootstrap")

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value, allowed = getattr(self, f.name), f.metadata["allowed"]
            if not fits(value, f.type.__name__):
                raise ValueError(f"004 parameter {f.name}: expects {f.type.__name__}, got {type(value).__name__} "
                                 f"{value!r} ({f.metadata['help']})")
            if allowed is not None and not allows(allowed, value):
                raise ValueError(f"004 parameter {f.name}: must be {allowed}, got {value!r} ({f.metadata['help']})")
        for role in ("reference", "treatment", "control", "positive_control"):
            if getattr(self, role) and getattr(self, role) not in self.arms:
                raise ValueError(f"004 parameter {role}: {getattr(self, role)!r} is not one of the arms "
                                 f"{list(self.arms)}; name one of them (or \"\" where none is allowed)")
        starts = {name: arm.get("start", "student") for name, arm in self.arms.items()}
        for name, start in starts.items():
            if start not in STARTS:
                raise ValueError(f"004 parameter arms: arm {name!r} has start {start!r}; one of {list(STARTS)}")
            if start == "planted" and self.arms[name].get("trace_replay_weight", 0) > 0:
                raise ValueError(f"004 parameter arms: arm {name!r} starts planted and trains on pairs, whose reference "
                                 "log-probs are the student's; a planted arm trains as the reference does")
        planted = [name for name, start in starts.items() if start == "planted" and name != self.positive_control]
        if planted:
            raise ValueError(f"004 parameter arms: arm {planted[0]!r} starts planted, but only the positive control "
                             f"({self.positive_control!r}) may: its advantage is planted, not trained")
        if self.reference == self.treatment:
            raise ValueError(f"004 parameters reference and treatment: two different arms, got {self.reference!r} "
                             "twice")
        if self.max_tool_calling_iterations <= self.env_max_steps:
            raise ValueError(f"004 parameter max_tool_calling_iterations ({self.max_tool_calling_iterations}) must be "
                             f"above env_max_steps ({self.env_max_steps}): TRL's tool loop must not stop before the "
                             "environment does")
        if self.doses and self.checkpoints:
            raise ValueError("004 parameters doses and checkpoints: set one, not both (checkpoints are nested doses "
                             "of one training)")

    @classmethod
    def of(cls, values: dict) -> "ABParameters":
        """The config of `values` (a notebook run's parameters, run.effective_parameters' values): its fields only,
        each checked; the rest (another notebook's, papermill's) left out."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})
