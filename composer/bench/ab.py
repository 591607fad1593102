"""Spike 004's cost per arm: wall time and peak memory of one seed's training, each arm in a fresh process.

    python -m composer bench ab                      # the report profile's scale (params/report/004-*.yaml)
    python -m composer bench ab --profile default    # the notebook's defaults (smoke scale: seconds)

    from composer.bench.ab import measure
    result = measure("report")                        # the dict printed as the last stdout line

The spike's reference and treatment arms (A and B; the control costs what B does, with as many pairs) train seed 0
from the same checkpoint on the same tasks with the same GRPO budget, exactly as the notebook's jobs do (composer.ab.training, the same plan), one after
another in a fresh spawned process (nothing else running in it), into a fresh folder: nothing is reused from a cache. Wall time is
the trainer's train() (generation, environment, grading, loss and optimizer steps); peak memory is the process's peak
RSS (VmHWM), interpreter and imports included, so the arms differ by what their training adds; `phases_s` splits
each arm's steps into generating, tools, resets and training (composer.costs.phases, summed over the steps).
Evaluation is excluded: it is the same job for every arm. Targets: B's time <= 1.5 x A's (`b_over_a_time`), its peak memory
<= 1.3 x A's (`b_over_a_mem`). Beside the time ratio, its work floor (`work_floor_time`): what B would take over A
if its pairs cost only their tokens at A's training cost per trained token (see `work_floor_time`); the ratio above
its floor is how B feeds its pairs, the floor itself what they are.
"""

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from composer import run
from composer.ab import preparation, training
from composer.ab.parameters import ABParameters
from composer.costs import phases
from composer.bench import machine
from composer.trainer import ComposerConfig, encode_pairs

SLUG = "004-ab-train-grpo-vs-trace-replay-dpo"
TARGETS = {"b_over_a_time": 1.5, "b_over_a_mem": 1.3}


def measure(profile: str = "report", *, reference: str | None = None, treatment: str | None = None) -> dict:
    machine_at_start = machine()
    params = ABParameters.of(run.effective_parameters(SLUG, profile=profile)[0])
    reference, treatment = reference or params.reference, treatment or params.treatment
    with tempfile.TemporaryDirectory(prefix="composer-bench-ab-") as tmp:
        arms = {name: params.arms[name] for name in (reference, treatment)}
        two_arms = dataclasses.replace(params, seeds=1, arms=arms, reference=reference, treatment=treatment,
                                       control="", positive_control="")
        inputs = preparation.prepare(two_arms, tmp)
        plan = training.plan_from_parameters(two_arms, inputs)
        start = time.perf_counter()
        done = training.run(plan, tmp, workers=1, train_only=True, progress=True)
        total = time.perf_counter() - start
        steps = {arm: phases.read(Path(tmp) / "jobs" / done[arm, 0]["keys"][0]) for arm in plan.arms}
        per_arm = {arm: {"wall_s": done[arm, 0]["train"]["wall_s"],
                         "peak_rss_bytes": done[arm, 0]["train"]["peak_rss_bytes"],
                         "phases_s": phase_totals(steps[arm])}
                   for arm in plan.arms}
        channel = {**params.trainer_config, **arms[treatment]}
        visits = len(steps[treatment]) * channel.get("trace_replay_batch_size", ComposerConfig.trace_replay_batch_size)
        pair_work = visits * tokens_per_pair(inputs.pairs[arms[treatment]["pairs"]]["path"], inputs.student) \
            if channel.get("trace_replay_weight", 0) > 0 else 0.0
        floor = work_floor_time(per_arm[reference]["wall_s"], steps[reference], pair_work)
    ratios = {"b_over_a_time": round(per_arm[treatment]["wall_s"] / per_arm[reference]["wall_s"], 3),
              "b_over_a_mem": round(per_arm[treatment]["peak_rss_bytes"] / per_arm[reference]["peak_rss_bytes"], 3)}
    return {
        **ratios, "work_floor_time": round(floor, 3), "pair_tokens_trained": round(pair_work),
        "arms": per_arm, "reference": reference, "treatment": treatment, "profile": profile,
        "scale": {k: getattr(params, k) for k in ("student", "steps", "prompts_per_step", "generations",
                                                  "max_completion_length", "env_max_steps")},
        "pairs": {"source": inputs.pairs_source, **{n: i["rows"] for n, i in inputs.pairs.items()}},
        "targets": TARGETS, "meets_targets": {name: ratios[name] <= bound for name, bound in TARGETS.items()},
        "scope": "one seed's training per arm, each in a fresh process; evaluation excluded (the same per arm); "
                 "peak memory is the process's peak RSS, interpreter and imports included",
        "total_s": round(total, 1), "device": "cpu", **machine_at_start,
    }


def tokens_per_pair(pairs_path, student) -> float:
    """The mean tokens a pair puts through the model once: its prompt (shared by its two completions), its chosen
    and its rejected, as the trainer encodes them (trainer.encode_pairs)."""
    from composer.disagreement import pairs
    from composer.models import load_tokenizer

    encoded = encode_pairs(load_tokenizer(student), pairs.load(pairs_path))
    return sum(len(e["prompt"]) + len(e["chosen"]) + len(e["rejected"]) for e in encoded) / len(encoded)


def work_floor_time(reference_wall_s: float, reference_steps: list[dict], pair_tokens: float) -> float:
    """B's time over A's if B were A's run plus `pair_tokens` (its pairs' tokens over the run, each pair visit's
    prompt once) trained at A's cost per trained token: A's training seconds over its trained tokens (phases:
    forward, backward and optimizer, the rollouts' unpadded tokens). A floor in tokens, not in attention's
    quadratic cost, nor the recompute of a checkpointed pair (memory bought with time)."""
    train_s = sum(r["train_s"] for r in reference_steps)
    tokens = sum(r["trained_tokens"] for r in reference_steps)
    return 1.0 + (train_s / tokens * pair_tokens / reference_wall_s if tokens else 0.0)


def phase_totals(records: list[dict]) -> dict:
    """Seconds of a training job's steps (phases.read) in each phase (composer.costs.phases.PHASES), summed."""
    return {name: round(sum(r[name] for r in records), 2) for name in phases.PHASES}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer bench ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="report", choices=run.PROFILES,
                        help="whose parameters: report (default), default (the notebook's), live")
    args = parser.parse_args(argv)
    result = measure(args.profile)
    for arm, figures in result["arms"].items():
        print(f"{arm}: {figures['wall_s']:.1f} s ("
              + ", ".join(f"{name[:-2]} {s:.1f}" for name, s in figures["phases_s"].items())
              + f"), peak RSS {figures['peak_rss_bytes'] / 2**20:.0f} MiB", file=sys.stderr)
    print(f"{result['treatment']} / {result['reference']}: time {result['b_over_a_time']}x (its pairs' work floor "
          f"{result['work_floor_time']}x: {result['pair_tokens_trained']:,} pair tokens), memory "
          f"{result['b_over_a_mem']}x", file=sys.stderr)
    print(json.dumps(result))
    return 0
