"""What spike 004's plan trains and evaluates on, prepared once per run folder: the student and its task splits, the
pairs datasets with reference log-probs under the student, and the train tasks screened for a GRPO signal. This is
the work (models loaded, rollouts sampled, files written, all cached under run_dir/inputs/);
training.plan_from_parameters then makes the Plan from the parameters and these inputs without any.

    from composer.ab import preparation, training
    inputs = preparation.prepare(parameters, "runs/004")   # parameters: composer.ab.parameters.ABParameters
    inputs.pairs["pairs"]["rows"], inputs.pairs_source, inputs.screened
    plan = training.plan_from_parameters(parameters, inputs)
"""

import dataclasses
import functools
import json
from dataclasses import dataclass
from pathlib import Path

from composer.ab import planting
from composer.ab.parameters import ABParameters
from composer.env.environment import EnvConfig
from composer.files import config_hash, publish


# Where the positive control's expert pairs come from, and whether that plants its effect: from the test tasks
# themselves, B+ is taught what the evaluation asks (a known effect that travels pairs -> training -> evaluation ->
# interval), so the design's power to see an effect of its size is checked by construction; from the train split it
# is checked only as far as expert pairs on other tasks reach the held-out ones. (ABParameters allows these two.)
PLANTED = {"train": False, "test": True}


@dataclass(frozen=True)
class Inputs:
    """`student`: a folder or a Hugging Face name; `profile`: its zoo profile (None for another student); `train`: the
    train split (screened when asked); `pairs`: {name: prepare_pairs' dict}; `pairs_source`: where the pairs come
    from, in words; `oracle`: they are oracle pairs, not 003's; `screened`: None, or the screened task_ids, their
    successes, the samples per task and how many were kept; `test_scope`: None, or in words which tasks the test
    tasks are when they are a pilot's within-reach file (composer.costs.pilot.reach_scope); `scan_only`: how many real
    tasks are graded by the tampering scan alone, on the opt-in (container.scan_only_refusal); `no_probes`: {id: why}
    of the real tasks passed over for having no held-out probes (container.probes_refusal); `planted`: None, or
    composer.ab.planting.plant's dict (the checkpoint an arm with "start": "planted" trains from)."""

    student: str
    profile: object
    train: list[dict]
    test: list[dict]
    env: EnvConfig
    max_new_tokens: int
    pairs: dict[str, dict]
    pairs_source: str
    oracle: bool
    screened: dict | None
    test_scope: str | None = None
    scan_only: int = 0
    no_probes: dict = dataclasses.field(default_factory=dict)
    planted: dict | None = None


def prepare_pairs(run_dir, name: str, make, *, student, source_key: str) -> dict:
    """A pairs dataset for the plan, with reference log-probs under the initial `student`, built once:
    make() -> the datasets.Dataset (e.g. 003's pairs), saved under run_dir/inputs/<name>-<hash of source_key and
    the student>/pairs. Rebuilt only when the source or the student changes, so the train jobs' hashes (which
    include the saved file) stay put. Returns {"path", "rows", "skipped"} (skipped: prompts past the context)."""
    from composer.disagreement import pairs

    def build(tmp: Path):
        dataset, skipped = pairs.add_reference_logps(make(), student)
        pairs.save(dataset, tmp / "pairs")
        (tmp / "meta.json").write_text(json.dumps({"rows": len(dataset), "skipped": skipped}), encoding="utf-8")

    folder = publish(Path(run_dir) / "inputs" / f"{name}-{config_hash(source=source_key, student=Path(student).name)}",
                      build)
    return {"path": str(folder / "pairs"), **json.loads((folder / "meta.json").read_text(encoding="utf-8"))}


def screen(student, tasks: list[dict], run_dir, *, n: int, temperature: float, max_new_tokens: int, env: EnvConfig,
           seed: int = 0, engine: str = "transformers") -> list[int]:
    """Successes in `n` sampled rollouts of the student on each task (policies.evaluate at GRPO's temperature),
    measured once: cached under run_dir/inputs/screen-<hash of everything that determines them>. GRPO learns only
    from a group whose rewards differ, so 004 can train on the tasks whose success rate is strictly between 0
    and 1 (the evaluation's sampler stands in for TRL's; the report shows the groups that had a signal)."""
    from composer import policies
    from composer.zoo import versions

    def build(tmp: Path):
        _, runs = policies.evaluate(student, tasks, k=1, n=n, temperature=temperature, seed=seed, env_config=env,
                                    max_new_tokens=max_new_tokens, return_rollouts=True, engine=engine)
        successes = [sum(reward == 1.0 for _, _, reward, _ in runs[i * n:(i + 1) * n]) for i in range(len(tasks))]
        (tmp / "result.json").write_text(json.dumps({"successes": successes}), encoding="utf-8")

    key = config_hash(student=Path(student).name, tasks=records_key(tasks), n=n, temperature=temperature,
                      max_new_tokens=max_new_tokens, env=dataclasses.asdict(env), seed=seed, **versions(),
                      **({"engine": engine} if engine != "transformers" else {}))
    folder = publish(Path(run_dir) / "inputs" / f"screen-{key}", build)
    return json.loads((folder / "result.json").read_text(encoding="utf-8"))["successes"]


def prepare(p: ABParameters, run_dir) -> Inputs:
    """The notebook's parameters -> the Inputs. The student: a zoo profile's ("zoo:smoke"), or any Hugging Face
    model (a name or a folder), which then needs its tasks and a turn budget named: p.train_tasks,
    p.test_tasks (sources load_instances reads, e.g. "lite:train:pytest" and "lite:test:pytest", SWE-bench
    Lite's fixed split) and p.max_new_tokens; a zoo student defaults to its profile's splits and budget. The
    pairs: 003's (pairs/ and shuffled/ under p.pairs_dir) or, when it is "" or missing, oracle pairs from
    p.oracle_pairs train tasks and their shuffled control; "expert": reference_pairs.expert_pairs, as many as B's
    (the positive control's), on the train split or, with p.positive_control_tasks "test", on the evaluated test
    tasks themselves (a planted effect), then at least one per test task; only the datasets some arm trains on are
    made. An arm with "start": "planted" gets composer.ab.planting's checkpoint of the student on the evaluated test
    tasks. With p.screen_tasks, GRPO trains only on those first train tasks whose success rate `screen` finds
    strictly between 0 and 1. Refuses real SWE-bench tasks that the tampering scan alone would grade or this
    machine cannot run, a control of another size than B's pairs, and pairs from test tasks (but the planted expert
    pairs); passes over real tasks without held-out probes (Inputs.no_probes)."""
    student, profile, env, train, test, refused = _tasks(p)
    max_new_tokens = p.max_new_tokens or profile.max_new_tokens
    made, pairs_source, oracle = _pairs(p, run_dir, student, train, test, max_new_tokens)
    train, screened = _screened(p, run_dir, student, train, env, max_new_tokens)
    planted = planting.plant(student, test, env, steps=p.plant_steps, learning_rate=p.plant_learning_rate,
                             run_dir=run_dir) if any(arm.get("start") == "planted" for arm in p.arms.values()) else None
    return Inputs(student=student, profile=profile, train=train, test=test, env=env, max_new_tokens=max_new_tokens,
                  pairs=made, pairs_source=pairs_source, oracle=oracle, screened=screened,
                  scan_only=refused["scan_only"], no_probes=refused["no_probes"], test_scope=_test_scope(p),
                  planted=planted)


def _local(source: str):
    """A path in the checkout, or what load_instances reads as it is."""
    from composer.paths import ROOT

    path = ROOT / source
    return path if not Path(source).is_absolute() and path.exists() else source


def _test_scope(p: ABParameters) -> str | None:
    from composer.costs import pilot

    return pilot.reach_scope(_local(p.test_tasks)) if p.test_tasks else None


def _tasks(p: ABParameters) -> tuple:
    """The student, its environment and its train and test tasks: refused where the scan alone would grade them or
    this machine cannot run them, those without held-out probes passed over -> (student, profile, env, train, test,
    {"scan_only": how many are graded by the scan alone on the opt-in, "no_probes": {id: why} of those passed over})."""
    from composer import zoo
    from composer.env.real import container
    from composer.env.real.swebench import is_real, load_instances, real_missing, scan_only_preflight, with_probes

    profile = zoo.PROFILES[p.student.split(":", 1)[1]] if p.student.startswith("zoo:") else None
    missing = [k for k in ("train_tasks", "test_tasks", "max_new_tokens") if not getattr(p, k)]
    if profile is None and missing:
        raise ValueError(f"student={p.student!r} is no zoo student, so no zoo profile supplies {missing}: set them "
                         "(e.g. train_tasks='lite:train:pytest', test_tasks='lite:test:pytest', max_new_tokens=4096)")
    student = str(zoo.model(profile, "student") if profile else p.student)
    train = load_instances(_local(p.train_tasks)) if p.train_tasks else zoo.split_tasks(profile, "train")
    test = load_instances(_local(p.test_tasks)) if p.test_tasks else zoo.split_tasks(profile, "test")
    env = dataclasses.replace(profile.env if profile else EnvConfig(), max_steps=p.env_max_steps)
    refused = scan_only_preflight({"test": test, "train": train}, env.grade_scan_only)
    if refused:  # before training
        raise ValueError(refused)
    scan_only = sum(is_real(t) and container.scan_only(t) for t in test + train)  # on the opt-in: the notes say
    used = train + test[:p.n_test or None]
    cannot = {t["instance_id"]: m for t in used if is_real(t) and (m := real_missing(t))}
    if cannot:  # before hours of training, not at the first episode on such a task
        first, problems = next(iter(cannot.items()))
        raise RuntimeError(f"{len(cannot)} of the real SWE-bench tasks cannot run here, e.g. {first}: "
                           + "; ".join(problems))
    # passed over: a reward on them would stand without held-out probes (n_test counts the tasks kept)
    test, no_probes = with_probes(test, p.n_test or None, env.grade_without_probes)
    train, passed = with_probes(train, None, env.grade_without_probes)
    no_probes.update(passed)
    if not train or not test:
        raise ValueError(f"no {'train' if not train else 'test'} task is left once the {len(no_probes)} without "
                         f"held-out probes are passed over; the first: {next(iter(no_probes.values()))}")
    return student, profile, env, train, test, {"scan_only": scan_only, "no_probes": no_probes}


def _pairs(p: ABParameters, run_dir, student: str, train: list[dict], test: list[dict],
           max_new_tokens: int) -> tuple[dict, str, bool]:
    """The pairs datasets some arm trains on, each with reference log-probs under the student -> ({name:
    prepare_pairs' dict}, where they come from in words, whether they are oracle pairs). Refuses pairs from test
    tasks (but the planted expert pairs), a control of another size than B's, and a dataset with no pair."""
    from composer.disagreement import pairs, reference_pairs
    from composer.env.environment import tool_schemas
    from composer.paths import ROOT

    source = Path(p.pairs_dir) if Path(p.pairs_dir).is_absolute() else ROOT / p.pairs_dir
    oracle = not (p.pairs_dir and (source / "pairs").is_dir() and (source / "shuffled").is_dir())
    if oracle:
        rows = reference_pairs.oracle_pairs(train[:p.oracle_pairs], seed=p.seed)
        made = {"pairs": lambda: pairs.to_dataset(rows, tool_schemas()),
                "shuffled": lambda: pairs.to_dataset(pairs.shuffled_pairs(rows, seed=p.seed), tool_schemas())}
        # keyed by what makes them, as the expert pairs are: their prompts carry test output that differs every run
        # (pytest's duration, object addresses), and a rerun must find them, or B's train jobs would all run again
        keys = {name: config_hash(oracle=records_key(train[:p.oracle_pairs]), name=name, seed=p.seed)
                for name in made}
        pairs_source = (f"oracle pairs ({len(rows)}: the expert's edit over the same edit with a slip, on train "
                        "tasks): " + (f"003's output was not found at {p.pairs_dir}" if p.pairs_dir
                                      else "no pairs_dir given"))
    else:
        made = {name: functools.partial(pairs.load, source / name) for name in ("pairs", "shuffled")}
        keys = {name: config_hash(text=(source / f"{name}.jsonl").read_text(encoding="utf-8")) for name in made}
        pairs_source = f"003's pairs ({p.pairs_dir})"
    needed = sorted({a.get("pairs") for a in p.arms.values() if a.get("trace_replay_weight", 0) > 0} - {None})
    unknown = [n for n in needed if n not in [*made, "expert"]]
    if unknown:
        raise ValueError(f"arms ask for pairs {unknown}; there are {sorted([*made, 'expert'])}")
    inputs = {name: prepare_pairs(run_dir, name, made[name], student=student, source_key=keys[name])
              for name in needed if name != "expert"}
    if "expert" in needed:  # the positive control: known-informative pairs, as many as B's (planted: or test tasks)
        if "pairs" not in inputs:
            raise ValueError("the 'expert' pairs (the positive control's) are as many as B's: an arm must train on "
                             "'pairs'")
        count, split = inputs["pairs"]["rows"], p.positive_control_tasks
        origin = train if split == "train" else test
        if PLANTED[split]:  # every evaluated task gets one: a gain planted on some tasks only reads as a wide interval
            count = max(count, len(origin))  # the dose stays B's: trace_replay_batch_size pairs an optimizer step
        inputs["expert"] = prepare_pairs(
            run_dir, "expert", lambda: pairs.to_dataset(reference_pairs.expert_pairs(
                origin, student, count=count, max_new_tokens=max_new_tokens), tool_schemas()),
            student=student, source_key=config_hash(expert=count, tokens=max_new_tokens, order="spread over tasks",
                                                    solved="anchored", **{split: records_key(origin)}))
    for name, info in inputs.items():
        if info["rows"] == 0:
            raise ValueError(f"the {name} dataset has no pair the student's context can hold "
                             f"({info['skipped']} skipped)")
    if {"pairs", "shuffled"} <= set(inputs) and inputs["pairs"]["rows"] != inputs["shuffled"]["rows"]:
        raise ValueError(f"the control must have as many pairs as B: {inputs['shuffled']['rows']} shuffled vs "
                         f"{inputs['pairs']['rows']}")
    test_ids = {r["instance_id"] for r in test}
    planted = {"expert"} if PLANTED[p.positive_control_tasks] else set()
    held_out = [info for name, info in inputs.items() if name not in planted]
    leaked = sorted({t for info in held_out for t in pairs.load(info["path"])["task_id"]} & test_ids)
    if leaked:
        raise ValueError(f"pairs come from test tasks ({leaked[:3]}): the evaluation would not be held out")
    return inputs, pairs_source, oracle


def _screened(p: ABParameters, run_dir, student: str, train: list[dict], env: EnvConfig,
              max_new_tokens: int) -> tuple[list[dict], dict | None]:
    """With p.screen_tasks, the first of the train tasks whose success rate `screen` finds strictly between 0 and
    1 (GRPO's gradient needs a group whose rewards differ) -> (those tasks, what the screening measured), else
    (train, None)."""
    if not p.screen_tasks:
        return train, None
    candidates = train[:p.screen_tasks]
    successes = screen(student, candidates, run_dir, n=p.generations, temperature=p.temperature,
                       max_new_tokens=max_new_tokens, env=env, seed=p.seed, **evaluation_engine(p))
    train = [t for t, c in zip(candidates, successes) if 0 < c < p.generations]
    screened = {"task_ids": [t["instance_id"] for t in candidates], "successes": successes,
                "samples": p.generations, "kept": len(train)}
    per_seed = tasks_per_seed({"steps": p.steps, "prompts_per_step": p.prompts_per_step, **p.trainer_config})
    if len(train) < per_seed:
        raise ValueError(f"{len(train)} of {len(candidates)} screened train tasks succeed in some but not all of "
                         f"{p.generations} rollouts at temperature {p.temperature}; a seed trains on "
                         f"{per_seed}: screen more (screen_tasks) or change the temperature")
    return train, screened


def records_key(records: list[dict]) -> str:
    return config_hash(records=records)


def evaluation_engine(p: ABParameters) -> dict:
    """One switch: GRPO generating through vLLM (TRL's use_vllm) makes the screening and evaluations use it too.
    Only then is the engine named, so the transformers path's cached jobs keep their keys."""
    return {"engine": "vllm"} if p.trainer_config.get("use_vllm") else {}


def tasks_per_seed(grpo: dict) -> int:
    """The train tasks one seed's GRPO samples: prompts_per_step per generation, and TRL generates once every
    num_iterations optimizer steps (the others train on the same rollouts again)."""
    return grpo["steps"] // grpo.get("num_iterations", 1) * grpo["prompts_per_step"]
