"""The plan of the live runs: GPU memory and hours (composer.costs.compute) and what 004's design detects for what it
costs (composer.costs.power), as tables in the params/live headers, and the best design within a budget.

    python -m composer plan                          # the tables; exit 1 if a live YAML header is out of date
    python -m composer plan --write                  # rewrite them in the headers (between PLAN_BEGIN and PLAN_END)
    python -m composer plan --budget-usd 5000        # the design detecting the smallest B - A within $5,000
    python -m composer plan --budget-usd 200 1000    # one row per budget: a Markdown table
    python -m composer plan --budget-usd 5000 --effect 0.05 --pool-file tasks.jsonl --student Qwen/Qwen3-4B
    python -m composer plan --from-run runs/004-pilot/jobs/train-B-s0-...   # the live 004 from measured phase times
    python -m composer plan --from-pilot runs/pilot  # the live 004 with the API pilot's measured numbers
    python -m composer plan --published              # the cost model against published runs (calibration)

    from composer.costs import plan
    plan.table("004-ab-train-grpo-vs-trace-replay-dpo", values)    # the header lines

ESTIMATES from the assumptions composer/costs/compute.py and composer/costs/power.py state, never measurements.
The search varies the treatment too (student, full or LoRA, steps, rollouts, turns and context): its best design is often a
different, cheaper experiment than the live profile's, and the output says what differs; the live profile's own
design and the best design that keeps its treatment are printed beside it. --from-run replaces the phase model's
assumptions with a run's measured phase times (composer.costs.phases: a pilot's, params/pilot/) and prints both.
--from-pilot reads `python -m composer pilot`'s summary (composer.costs.pilot): the student's base rate, its discordance,
its task spread and its tool, grading and turn figures, and says which numbers are measured and which assumed.
"""

import argparse
import dataclasses
import json
import math
import re
import sys
from pathlib import Path

import yaml

from composer.costs import compute, power
from composer.costs.compute import GPUS, SETUPS, gpu_hours, memory_gb, workload
from composer.costs.compute import MODELS  # noqa: F401 (plan.MODELS, .gpu_hours, .workload: tests/test_ab_cluster.py)
from composer.paths import ROOT

PLAN_BEGIN = "# --- plan: python -m composer plan --write (computed by composer/costs/plan.py; do not edit) ---"
PLAN_END = "# --- end of plan ---"
# The power assumptions the command line sets (--task-sd-logit, ...); a student's base rate comes with --base-rate or
# --from-pilot, per student.
ASSUMED = [f.name for f in dataclasses.fields(power.Assumptions) if f.name != "pass_at_1"]
LIVE_004 = "004-ab-train-grpo-vs-trace-replay-dpo"


def table(slug: str, values: dict) -> list[str]:
    """The header lines of one live profile's plan (comment lines, PLAN_BEGIN to PLAN_END)."""
    w = workload(values)
    model = compute.model(w["model"])
    lines = [PLAN_BEGIN,
             f"# {w['model']}: {w['steps']} steps x {w['rollouts_per_step']} rollouts, sequences up to "
             f"{w['seq_tokens']} tokens (~{w['tokens_per_rollout']:.0f} in ~{w['turns']:.0f} turns a rollout); "
             + ", ".join(f"{name} {g.memory_gb:.0f} GB" for name, g in GPUS.items())
             + "; ESTIMATES (composer/costs/compute.py); environment concurrent (composer.episodes, the code's "
             "default).",
             "# | mode | layout | GB per training GPU (state + activations + vLLM + runtime) "
             "| fits | step s (generate + tools + grade + train) | hours | GPU-hours per arm and seed |"]
    live = [power.live_setup(values)] if slug == LIVE_004 else []
    for setup in live + [s for s in SETUPS[slug] if s not in live]:
        mem = memory_gb(model, setup, seq_tokens=w["seq_tokens"])
        cost = gpu_hours(model, setup, steps=w["steps"], rollouts_per_step=w["rollouts_per_step"],
                         tokens_per_rollout=w["tokens_per_rollout"], turns=w["turns"])
        fits = "yes" if mem["fits"] else "no" + ("" if mem["vllm_holds_model"] else " (vLLM's share < the model)")
        extras = (" + hint teacher" if setup.hint_teacher else "") + (
            f" + DPO ({setup.dpo_pairs} pair{'s' if setup.dpo_pairs > 1 else ''})" if setup.dpo_pairs else "")
        lines.append(f"# | {setup.mode}{extras} | {power.describe_layout(setup)} | "
                     f"{mem['total']:.1f} ({mem['training_state']:.1f} + {mem['activations']:.1f} + "
                     f"{mem['vllm']:.1f} + {mem['runtime']:.1f}) | {fits} | {cost['step_s']:,.0f} "
                     f"({cost['generate_s']:,.0f} + {cost['tools_s']:,.0f} + {cost['grade_s']:,.0f} + "
                     f"{cost['train_s']:,.0f}) | {cost['hours']:.2f} | {cost['gpu_hours']:.1f} |")
    if slug == LIVE_004:
        setup = power.live_setup(values)
        t, prices = power.treatment(values), power.Assumptions()
        cheapest = power.layout(t, prices)
        at = dict(steps=w["steps"], rollouts_per_step=w["rollouts_per_step"],
                  tokens_per_rollout=w["tokens_per_rollout"], turns=w["turns"])
        concurrent, serial = gpu_hours(model, setup, **at), gpu_hours(model, setup, **at, concurrent_tools=False)
        cache = compute.kv_tokens(model, GPUS[setup.gpu], setup.fraction, setup.tp)
        lines += [f"# The live layout ({power.describe_layout(setup)}) is "
                  + ("the cheapest" if setup == cheapest else f"NOT the cheapest ({power.describe_layout(cheapest)})")
                  + f" of the {len(power.layouts(t))} layouts that fit this treatment among the "
                  f"{len(power.candidate_layouts(t.mode))} composer/costs/power.py prices "
                  f"(${prices.usd_per_h100_hour}/H100-hour, ${prices.usd_per_h200_hour}/H200-hour).",
                  f"# There a step's {concurrent['episodes_per_engine']} episodes an engine share its KV cache "
                  f"({cache:,.0f} tokens): {concurrent['batch_last']} contexts at once by the last turn, each turn "
                  f"re-prefilled once they outgrow it ({concurrent['prefill_s']:,.0f} s prefill, "
                  f"{concurrent['decode_s']:,.0f} s decode a step). With TRL's serial tool loop "
                  f"(collect.build_trainer(concurrent_tools=False)) a step would take {serial['step_s']:,.0f} s: "
                  f"{serial['gpu_hours']:,.0f} GPU-hours per arm and seed."
                  ] + power.lines(values)
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
    defaults = power.Assumptions()
    parser = argparse.ArgumentParser(prog="python -m composer plan", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the plan blocks of params/live/*.yaml")
    parser.add_argument("--budget-usd", type=float, nargs="+", help="print the design that detects the smallest "
                        "B - A within this many dollars (composer/costs/power.py), JSON last; several budgets: a table")
    parser.add_argument("--effect", type=float, help="with --budget-usd, also the cheapest design that detects this "
                        "B - A")
    parser.add_argument("--pool-file", help="with --budget-usd, evaluate on this file's records (.json, .jsonl, "
                        ".parquet) instead of the named pools")
    parser.add_argument("--student", action="append", help=f"with --budget-usd, search only this student "
                        f"(repeatable; default {', '.join(power.STUDENTS)})")
    parser.add_argument("--base-rate", action="append", default=[], metavar="STUDENT=P", help="with --budget-usd, a "
                        "student's pass@1 on the pool (a pilot's or a cited figure), in place of power.BASE_RATES "
                        "(repeatable)")
    parser.add_argument("--serial-tools", action="store_true", help="price TRL's serial tool loop: each process runs "
                        "its episodes' tool calls and gradings one after another (collect.build_trainer("
                        "concurrent_tools=False); default: concurrently, as the code runs them)")
    parser.add_argument("--from-run", metavar="DIR", help="price the live 004's training from the phase times a run "
                        "measured (DIR/phases.jsonl, composer.costs.phases) beside the assumption-only figure")
    parser.add_argument("--published", action="store_true", help="the cost model against published runs at their "
                        "own layouts (composer/costs/calibration.py): a table, JSON last")
    parser.add_argument("--from-pilot", metavar="DIR", help="the live 004 with what `python -m composer pilot` "
                        "measured (DIR/pilot.json): base rate, discordance, task spread, tool/grading/turn figures")
    for name in ASSUMED:
        value = getattr(defaults, name)
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=value,
                            help=f"power assumption (composer/costs/power.py; default {value})")
    args = parser.parse_args(argv)
    if args.published:
        from composer.costs import calibration

        print("\n".join(calibration.table()))
        print(json.dumps(calibration.rows()))
        return 0
    if args.from_run is not None:
        return _from_run(args.from_run, concurrent_tools=not args.serial_tools)
    if args.from_pilot is not None:
        return _from_pilot(args.from_pilot, power.Assumptions(**{k: getattr(args, k) for k in ASSUMED}),
                           concurrent_tools=not args.serial_tools)
    if args.budget_usd is not None:
        return _budget(args, power.Assumptions(**{k: getattr(args, k) for k in ASSUMED}))
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


def _pools(pool_file: str | None) -> dict | None:
    """The test pool of --pool-file (its records, as 004 would read them), or None for power.named_pools()."""
    if pool_file is None:
        return None
    from composer.env.real import container, swebench  # the task loader and its validation: only for this option

    records = swebench.load_instances(pool_file)
    refused = [why for r in records if swebench.is_real(r) and (why := container.scan_only_refusal(r))]
    if refused:  # 004 would refuse the run before training (preparation.prepare): so would a plan to price it
        raise ValueError(f"{len(refused)} of {len(records)} records in {pool_file} are graded by the tampering scan "
                         f"alone, which 004 refuses; the first: {refused[0]}")
    tasks = len(records)
    if tasks < 2:
        raise ValueError(f"{tasks} record(s): a design needs at least 2 test tasks")
    return {pool_file: (tasks, f"the records of {pool_file}", "tasks apart from them")}


def differences(d: dict, live: dict) -> list[str]:
    """What of a design's treatment differs from the live profile's, in words ("" when nothing does)."""
    names = {"student": "student", "mode": "fine-tuning", "steps": "steps", "rollouts_per_step": "rollouts per step",
             "max_turns": "turns", "max_tokens": "tokens"}
    return [f"{label} {d[k]} (live: {live[k]})" for k, label in names.items() if d[k] != live[k]]


def _budget(args, assumptions) -> int:
    bad = [b for b in args.budget_usd if not b > 0]
    if bad or (args.effect is not None and not args.effect > 0):
        what = f"--budget-usd must be > 0, got {bad[0]:g}" if bad else f"--effect must be > 0, got {args.effect:g}"
        print(f"{what}: dollars (e.g. --budget-usd 5000) and a B - A in pass@1 (e.g. --effect 0.05)", file=sys.stderr)
        return 2
    students = tuple(args.student or power.STUDENTS)
    try:
        for name in students:
            compute.model(name)
    except ValueError as e:
        print(f"--student: {e}", file=sys.stderr)
        return 2
    try:
        base_rates = {}
        for item in args.base_rate:
            name, _, value = item.partition("=")
            base_rates[name] = (float(value), "given on the command line")
            compute.model(name)
            if not 0 <= base_rates[name][0] <= 1:
                raise ValueError("a pass@1 is between 0 and 1")
    except ValueError as e:
        print(f"--base-rate {item}: {e} (STUDENT=P, e.g. Qwen/Qwen3-8B=0.12)", file=sys.stderr)
        return 2
    try:
        pools = _pools(args.pool_file)
    except (OSError, ValueError) as e:
        print(f"--pool-file {args.pool_file}: {e}", file=sys.stderr)
        return 2
    values = yaml.safe_load((ROOT / "params/live" / f"{LIVE_004}.yaml").read_text())
    found = {b: power.search(b, values, assumptions, effect=args.effect, pools=pools, students=students,
                             concurrent_tools=not args.serial_tools, base_rates=base_rates) for b in args.budget_usd}
    live = next(iter(found.values()))["live"]
    print(f"assumptions: {json.dumps(dataclasses.asdict(assumptions))} (composer/costs/power.py); the environment "
          + ("serial per process (--serial-tools: TRL's loop, collect.build_trainer(concurrent_tools=False))"
             if args.serial_tools else "concurrent (composer.episodes, the code's default)"))
    refused = {k: v for r in found.values() for k, v in r["refused"].items()}
    rates = next(iter(found.values()))["base_rates"]
    print(f"the live profile's design: {power.describe(live)}"
          + (f"; its student is refused: {refused[live['student']]}" if live["student"] in refused else ""))
    print("base rates (the mde is at each student's, discordance 2 p (1 - p)): "
          + "; ".join(f"{name.split('/')[-1]} {r['pass_at_1']:.1%} ({r['source']})" for name, r in rates.items()))
    if refused:
        print("refused: " + "; ".join(refused.values()))
    if len(args.budget_usd) > 1:
        print("\n| budget | best design within it: treatment; arms, seeds x tasks x samples | mde | GPU-hours | cost "
              "| with the live profile's treatment |\n|---|---|---|---|---|---|")
        for b, r in found.items():
            d, same = r["best"], r["best_same_treatment"]
            other = (" (a different experiment)" if d and differences(d, r["live"]) else "") + (
                " (the grid's largest: more money buys nothing here)" if d and capped(d) else "")
            row = (f"{brief(d)}{other} | {d['mde']:.3f} | {d['gpu_hours']:,.0f} | ${d['usd']:,.0f}" if d else
                   f"nothing: the cheapest design costs ${r['cheapest']['usd']:,.0f} | | |" if r["cheapest"] else
                   "no student above the floor fits | | |")
            print(f"| ${b:,.0f} | {row} | " + (f"{brief(same, treatment=False)}: mde {same['mde']:.3f}, "
                                                f"${same['usd']:,.0f}" if same else _same_text(r, b)) + " |")
    else:
        [(b, r)] = found.items()
        print(f"best within ${b:,.0f}: {_best_text(r, b)}")
        print(f"best within ${b:,.0f} with the live profile's treatment: {_same_text(r, b)}")
        if args.effect is not None:
            c, same = r["cheapest_for_effect"], r["cheapest_for_effect_same_treatment"]
            print(f"to detect {args.effect:g}: " + (power.describe(c) if c else "no design in the search does")
                  + "; with the live profile's treatment: " + (power.describe(same) if same else "none does"))
    print(json.dumps({"budget_usd": args.budget_usd, "assumptions": dataclasses.asdict(assumptions),
                      "concurrent_tools": not args.serial_tools, "live_design": live,
                      "results": [{k: v for k, v in r.items() if k != "live"} for r in found.values()]}))
    return 0


def brief(d: dict, *, treatment: bool = True) -> str:
    """A design in a table cell: its treatment (optional), arms and seeds x tasks x samples."""
    what = (f"{d['student'].split('/')[-1]} {d['mode']}, {d['steps']} steps x {d['rollouts_per_step']} rollouts, "
            f"{d['max_turns']} turns / {d['max_tokens'] // 1024}k tokens on {power.describe_layout(d)}; "
            if treatment else "")
    return f"{what}{len(d['arms'])} arms, {d['seeds']} x {d['tasks']} ({d['pool']}) x {d['samples']}"


def _best_text(r: dict, budget: float) -> str:
    d = r["best"]
    if d is None and r["cheapest"] is None:
        return "no student above the floor fits a layout: " + "; ".join(r["refused"].values())
    if d is None:
        return f"nothing: the cheapest design costs ${r['cheapest']['usd']:,.0f} ({power.describe(r['cheapest'])})"
    changed = differences(d, r["live"])
    return power.describe(d) + (f"; a different experiment from the live profile's: {', '.join(changed)}" if changed
                                else "; the live profile's treatment")


def capped(d: dict) -> bool:
    """Whether a design sits at the search grid's largest seeds, samples and test pool (a larger budget cannot buy a
    design the grid has)."""
    return (d["seeds"] == max(power.SEEDS) and d["samples"] == max(power.SAMPLES)
            and d["tasks"] == max(n for n, *_ in power.named_pools().values()))


def _same_text(r: dict, budget: float) -> str:
    d, cheapest = r["best_same_treatment"], r["cheapest_same_treatment"]
    if d is not None:
        return power.describe(d)
    if r["live"]["student"] in r["refused"]:
        return "refused: " + r["refused"][r["live"]["student"]]
    return f"none within ${budget:,.0f}: its cheapest design costs ${cheapest['usd']:,.0f}" if cheapest else "none fits"


def from_run(run_dir, values: dict, *, concurrent_tools: bool = True) -> dict:
    """The live profile's training (arm B at its layout, one arm and seed) priced from the phase times a run measured
    (composer.costs.phases.scaled), with the assumption-only figure (`assumed`) and what was measured (`unit`).
    The tool, grading, start and turn figures carry over always; the generation and training seconds only from a run of the
    same model on the layout's GPU kind (`compute_carried`), else they stay assumed."""
    from composer.costs import phases  # imports transformers: only for this option

    unit = phases.per_unit(phases.read(run_dir))
    w = workload(values)
    setup = power.live_setup(values)
    carried = same_compute(unit, w["model"], setup.gpu)
    kept = unit if carried else {**unit, "generate_s_per_turn": None, "train_s_per_token": None}
    cost = phases.scaled(kept, compute.model(w["model"]), setup, steps=w["steps"],
                         rollouts_per_step=w["rollouts_per_step"], tokens_per_rollout=w["tokens_per_rollout"],
                         turns=w["turns"], concurrent_tools=concurrent_tools)
    return {"unit": unit, "setup": setup, "workload": w, "compute_carried": carried, **cost}


def same_compute(unit: dict, model: str, gpu: str) -> bool:
    """Whether a run's generation and training seconds are the live run's: the same model (its name, or a folder
    named after it) on the same GPU kind."""
    name = unit["model"].rstrip("/").split("/")[-1].lower()
    return name == model.split("/")[-1].lower() and gpu in (unit.get("gpu") or "")


def _from_run(run_dir, *, concurrent_tools: bool) -> int:
    from composer.costs.phases import PhaseFileError

    values = yaml.safe_load((ROOT / "params/live" / f"{LIVE_004}.yaml").read_text())
    try:
        r = from_run(run_dir, values, concurrent_tools=concurrent_tools)
    except PhaseFileError as e:
        print(f"--from-run: {e}", file=sys.stderr)
        return 2
    u, w, s, a = r["unit"], r["workload"], r["setup"], r["assumed"]
    tools = ", ".join(f"{n} {t['s_per_call']:.3g} s x {t['calls']}" for n, t in u["tool_s_by_name"].items())
    lines = {"generate_s_per_turn": ("generation", "s per turn of an episode", "vLLM prefill and decode "
                                     f"(compute.generation_s: MFU {compute.MFU}, {compute.DECODE_BANDWIDTH_SHARE:.0%} "
                                     "of HBM bandwidth)"),
             "tool_s_per_call": ("tools", f"s per call ({tools})", f"TOOL_S {compute.TOOL_S:.3g} s"),
             "grade_s_per_submission": ("grading", "s per submission", f"GRADING_S {compute.GRADING_S:g} s"),
             "start_s_per_episode": ("episode start", "s per episode", f"START_S {compute.START_S:g} s"),
             "train_s_per_token": ("training", "s per trained token, per process",
                                   f"FLOPs at MFU {compute.MFU} of {s.gpu}'s peak")}
    print(f"measured: {u['steps']} step(s) of {Path(run_dir) / 'phases.jsonl' if Path(run_dir).is_dir() else run_dir}"
          f" on {u['device']} ({u['processes']} process{'es' if u['processes'] > 1 else ''}), model {u['model']}; "
          f"{u['turns_per_episode'] or 0:.1f} turns an episode, {u['tool_calls_per_turn'] or 0:.2f} tool calls a turn")
    print("replaced (measured; assumed):")
    for key, (what, unit, assumed) in lines.items():
        value, measured = r["replaced"].get(key), u.get(key)
        print(f"  {what}: " + (f"{value:.4g} {unit}; {assumed}" if value is not None else
                               f"{measured:.4g} {unit} measured, not carried over: {assumed}" if measured is not None
                               else f"not in the run, the assumption kept: {assumed}"))
    print(f"the live {LIVE_004} ({w['model']} {s.mode}, {power.describe_layout(s)}, DPO {s.dpo_pairs} pair a "
          f"micro-batch): {w['steps']} steps x {w['rollouts_per_step']} rollouts ({r['episodes_per_process']} episodes "
          f"per training process), ~{w['turns']:.0f} turns and ~{w['tokens_per_rollout']:.0f} tokens a rollout")
    print("| s per step | generate | tools | grade (start + grading) | train | step |\n|---|---|---|---|---|---|")
    for label, c in (("assumed (composer/costs/compute.py)", a), ("measured phase times", r)):
        print(f"| {label} | " + " | ".join(f"{c[k]:,.0f}" for k in ("generate_s", "tools_s", "grade_s", "train_s",
                                                                     "step_s")) + " |")
    print(f"GPU-hours per arm and seed: {a['gpu_hours']:,.1f} assumed, {r['gpu_hours']:,.1f} from the measured "
          f"phase times ({r['hours']:,.1f} h on {s.gpus} GPUs)")
    where = f"{u['model']} on {u.get('gpu') or u['device']}"
    print(f"carried over: tool, grading, start and turn figures; generation and training seconds "
          + (f"too (the run measured {where}, the live model on its GPU kind)" if r["compute_carried"] else
             f"NOT: the run measured {where}, not {w['model']} on an {s.gpu}; they stay assumed"))
    print(json.dumps({"from_run": str(run_dir), "unit": u, "setup": dataclasses.asdict(s),
                      "compute_carried": r["compute_carried"],
                      "assumed": {k: a[k] for k in ("generate_s", "tools_s", "grade_s", "train_s", "step_s", "hours",
                                                    "gpu_hours")},
                      "measured": {k: r[k] for k in ("generate_s", "tools_s", "grade_s", "train_s", "step_s",
                                                     "hours", "gpu_hours", "replaced")}}))
    return 0


def from_pilot(summary: dict, values: dict, assumptions: power.Assumptions, *, concurrent_tools: bool = True) -> dict:
    """The live profile's design and training priced with what an API pilot measured (composer.costs.pilot's summary):
    its base rate and discordance in place of the assumed ones (the mde; the assumed design is the live header's, at
    the student's published rate), its turns, tool, start and grading seconds in place of compute.py's
    (phases.scaled). Generation and training seconds stay assumed: an API's latency is not the GPU's generation
    time, and a pilot trains nothing. A base rate of 0 or 1 gives the power model nothing to plan from (two runs
    cannot differ there): the assumptions stay, and `unused` says why. The task spread is reported only."""
    from composer.costs import phases  # imports transformers: only for this option

    p1 = (summary.get("pass_at_1") or {}).get("estimate")
    disc = (summary.get("discordance") or {}).get("estimate")
    measured, unused = {}, {}
    if p1 is not None and 0 < p1 < 1:
        measured = {"pass_at_1": p1, **({"discordance": disc} if disc is not None else {})}
    elif p1 is not None:
        unused["pass_at_1"] = (f"a base pass@1 of {p1:.3f}: two runs cannot differ there, so the power model keeps "
                               "its assumptions")
    published = power.BASE_RATES.get(values["student"])
    d_assumed = power.design(values, assumptions, base_rate=published and published[0])
    used = dataclasses.replace(assumptions, **measured)
    d_measured = power.design(values, used) if measured else d_assumed
    w = workload(values)
    ph = summary.get("phases") or {}
    unit = {"generate_s_per_turn": None, "train_s_per_token": None,
            **{k: ph.get(k) for k in ("tool_s_per_call", "grade_s_per_submission", "start_s_per_episode")}}
    turns = ph.get("turns_per_episode") or w["turns"]
    setup = power.live_setup(values)
    cost = phases.scaled(unit, compute.model(w["model"]), setup, steps=w["steps"],
                         rollouts_per_step=w["rollouts_per_step"], tokens_per_rollout=w["tokens_per_rollout"],
                         turns=turns, concurrent_tools=concurrent_tools)
    return {"measured": measured, "unused": unused, "assumptions": dataclasses.asdict(used), "design_assumed": d_assumed,
            "design_measured": d_measured, "turns": {"measured": ph.get("turns_per_episode"), "assumed": w["turns"]},
            "unit": unit, "setup": setup, "workload": w, **cost}


def _from_pilot(path, assumptions: power.Assumptions, *, concurrent_tools: bool) -> int:
    from composer.costs import pilot

    try:
        summary = pilot.read(path)
    except pilot.PilotError as e:
        print(f"--from-pilot: {e}", file=sys.stderr)
        return 2
    values = yaml.safe_load((ROOT / "params/live" / f"{LIVE_004}.yaml").read_text())
    r = from_pilot(summary, values, assumptions, concurrent_tools=concurrent_tools)
    p1, pk, disc, spread = (summary.get(k) for k in ("pass_at_1", "pass_at_k", "discordance", "task_spread"))
    e = summary["episodes"]
    print(f"pilot ({summary['backend']}): {summary['student']['model']} on {len(summary['tasks'])} {summary['pool']} "
          f"tasks x {summary['samples']}, {e['complete']} of {e['planned']} episodes"
          + ("" if summary["complete"] else " (incomplete)"))
    if summary["backend"] == "offline":
        print("note: an offline pilot (a loopback or simulated endpoint): its figures are a rehearsal's, not the live "
              "student's")
    a = dataclasses.asdict(assumptions)
    ph, rep = summary.get("phases") or {}, r["replaced"]

    def num(value, fmt=".3f"):
        return "not measured" if value is None else format(value, fmt)

    student = next((m for m in compute.MODELS if m.lower() == summary["student"]["model"].lower()), None)
    published = power.BASE_RATES.get(student)
    rows = [
        ("base pass@1", num(p1 and p1["estimate"]) + (f" [{p1['low']:.3f}, {p1['high']:.3f}]" if p1 else ""),
         f"{published[0]} ({published[1]})" if published else "none published",
         "; ".join([f"the search's floor ({power.HEADROOM_FLOOR:.0%}) and mde, given as --base-rate (below)",
                    "the live design's mde: measured" if "pass_at_1" in r["measured"] else
                    r["unused"].get("pass_at_1", "the live design's mde: assumed")])),
        (f"pass@{summary['samples']}", num(pk and pk["estimate"]) + (f" [{pk['low']:.3f}, {pk['high']:.3f}]"
                                                                    if pk else ""), "none", "reported"),
        ("discordance (two runs of a task disagree)", num(disc and disc["estimate"]), f"{a['discordance']}",
         "measured" if "discordance" in r["measured"] else "assumed"),
        ("task spread of the base rate (SD)", num(spread and spread["sd"]),
         f"task_sd_logit {a['task_sd_logit']} is the spread of B - A, which no pilot measures",
         "assumed (task_sd_logit)"),
        ("seed spread (SD, logit)", "not measured", f"{a['seed_sd_logit']}", "assumed"),
        ("turns an episode", num(ph.get("turns_per_episode"), ".1f"), f"{r['turns']['assumed']:.1f}",
         "measured" if ph.get("turns_per_episode") else "assumed"),
        ("tool call, s", num(ph.get("tool_s_per_call"), ".3g"), f"{compute.TOOL_S:.3g}",
         "measured" if "tool_s_per_call" in rep else "assumed"),
        ("grading, s a submission", num(ph.get("grade_s_per_submission"), ".3g"), f"{compute.GRADING_S:g}",
         "measured" if "grade_s_per_submission" in rep else "assumed"),
        ("episode start, s", num(ph.get("start_s_per_episode"), ".3g"), f"{compute.START_S:g}",
         "measured" if "start_s_per_episode" in rep else "assumed"),
        ("generation, s a turn", num(ph.get("generate_s_per_turn"), ".3g") + " (the API's latency)",
         "compute.generation_s on the live GPUs", "assumed: an API's latency is not a GPU's generation time"),
        ("training, s a token", "not measured", "compute.training_s", "assumed"),
    ]
    print("| figure | pilot | assumption | the plan uses |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    dm, da, s = r["design_measured"], r["design_assumed"], r["setup"]
    print(f"the live {LIVE_004}: {dm['seeds']} seeds x {dm['tasks']} tasks ({dm['pool']}) x {dm['samples']} samples "
          f"detects B - A >= {dm['mde']:.3f} with the pilot's base rate and discordance ({da['mde']:.3f} assumed)")
    if p1 and p1["estimate"] < power.HEADROOM_FLOOR:
        print(f"warning: the student's base pass@1 {p1['estimate']:.3f} [{p1['low']:.3f}, {p1['high']:.3f}] is below "
              f"the {power.HEADROOM_FLOOR:.0%} floor: the plan refuses it (too little room to show a 2-point effect)"
              + (", and 004 on it could not read INVALIDATED" if p1["high"] < power.HEADROOM_FLOOR else ""))
    elif p1 and p1["estimate"] > 1 - power.HEADROOM_FLOOR:
        print(f"warning: the student's base pass@1 {p1['estimate']:.3f} is above the {1 - power.HEADROOM_FLOOR:.0%} "
              "ceiling: the plan refuses it (too little room above it to show a 2-point effect)")
    elif p1 and p1["high"] < dm["mde"]:
        print(f"warning: the student's base pass@1 is at most {p1['high']:.3f} (95 % upper bound), below the mde "
              f"{dm['mde']:.3f}: it may have no room to show the effect the design can detect")
    print(f"training GPU-hours per arm and seed ({s.gpus} GPUs, vLLM {s.vllm}): {r['assumed']['gpu_hours']:,.1f} "
          f"assumed, {r['gpu_hours']:,.1f} with the pilot's turns, tool, start and grading seconds")
    def refused(rate) -> str | None:  # why the search would not plan this student at `rate`, or None
        return power.refusal(student, {student: (rate, "the pilot")})

    if p1 and student and refused(p1["estimate"]) is None:
        print(f"designs for this student at its measured base rate: python -m composer plan --budget-usd 5000 "
              f"--student {student} --base-rate {student}={p1['estimate']:.3f}")
    reach, folder = summary.get("within_reach"), Path(path) if Path(path).is_dir() else Path(path).parent
    if reach and reach["tasks"] >= 2 and student:
        why = refused(reach["pass_at_1"])
        print(f"within reach: {reach['tasks']} of {reach['of']} tasks solved at least once in {reach['samples']} "
              f"runs, pass@1 {reach['pass_at_1']:.3f} on them (optimistic: the same runs chose them). An A/B on them "
              f"only (004's test_tasks={folder / reach['file']}; its verdict then speaks for them alone): "
              + (f"python -m composer plan --budget-usd 5000 --student {student} --base-rate "
                 f"{student}={reach['pass_at_1']:.3f} --pool-file {folder / reach['file']}" if why is None else why))
    print(json.dumps({"from_pilot": str(path), "backend": summary["backend"], "base_pass_at_1": p1,
                      "pass_at_k": pk, "discordance": disc, "task_spread": spread, "measured": r["measured"],
                      "unused": r["unused"],
                      "within_reach": summary.get("within_reach"),
                      "mde": {"measured": dm["mde"], "assumed": da["mde"]},
                      "gpu_hours": {"measured": r["gpu_hours"], "assumed": r["assumed"]["gpu_hours"]},
                      "replaced": r["replaced"], "turns": r["turns"]}))
    return 0
