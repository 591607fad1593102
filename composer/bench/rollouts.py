"""Rollout collection throughput and the trace recorder's overhead, per training substrate.

    python -m composer bench rollouts [--policy scripted|model] [--student PATH] [--prompts 2] [--generations 2]
                                      [--steps 2] [--repeats 2] [--seed 0]

    from composer.bench.rollouts import measure
    result = measure(policy="scripted")          # the dict printed as the last stdout line

TRL (spike 002a): real GRPOTrainer optimizer steps on the embedded environment through environment_factory
(RecordingEnv), `prompts x generations` rollouts per step, a checkpoint per step as collect_trl runs them. The
same run is timed with the recorder attached and without it, alternately, `repeats` times each; both arms use the
same seed, so they do the same work.

  --policy scripted  (default) the sampler is scripted (composer.collection.collect.scripted_sampler: run_tests, the gold
                     edits, submit): multi-step episodes with real tool calls, identical in both arms, so the ratio
                     is the recorder's cost and nothing else. The model still computes GRPO's loss and steps.
  --policy model     the student samples (default: the smoke zoo's student; --student PATH for another).

Keys of the JSON line:
  trl_rollouts_per_s        rollouts per second of trainer.train() wall-clock, recorder attached (median run)
  recorder_overhead         median wall-clock with the recorder / median without. Target: <= 1.05
  recorder_s_per_rollout    time inside the trainer-side hook per rollout (its own measurement)
  recorder_share_of_wall    that time / the run's wall-clock: the part of the overhead measured directly, free of
                            the run-to-run noise of a shared machine (the environment-side log is not in it)
  trl_phases_s_per_step     seconds of an optimizer step by phase (composer.costs.phases: step_s, generate_s, tools_s,
                            reset_s, train_s, grade_s), each the mean over a run's steps, the median over the runs
                            with the recorder
  verifiers_rollouts_per_s  rollouts per second through verifiers (002b): the same number of scripted rollouts
                            (4 sandboxed test runs each) through its harness, MCP tool server and eval client

Results (2026-11-30, the shared 2-core dev VM at load average ~8 from other jobs; defaults: scripted policy, 2 steps
of 2 prompts x 2 generations, 2 repeats): trl_rollouts_per_s 0.18, recorder_overhead 1.02 (runs of one arm spread
from 37 to 52 s, so the ratio's noise is far larger than the recorder), recorder 23 ms per rollout, about 0.4% of
the wall-clock. A rollout's time goes to TRL (prompt rendering, the GRPO forward/backward on ~3k-token sequences,
a checkpoint per step) and the environment's sandboxed test runs; the recorder decodes each turn's tokens, joins
the environment log and writes one fsynced JSON line per step.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from composer.bench import machine

TARGET_OVERHEAD = 1.05


def _trl_run(model_path, instances, *, record: bool, policy: str, steps: int, prompts: int, generations: int,
             seed: int) -> dict:
    from composer.collection import collect
    from composer.costs import phases
    from composer.policies import ENV_CONFIG

    sampler = None
    if policy == "scripted":
        sampler = collect.scripted_sampler({r["instance_id"]: collect.solve_plan(r) for r in instances})
    with tempfile.TemporaryDirectory(prefix="bench-rollouts-") as tmp:
        out = collect.collect_trl(model_path, instances, Path(tmp), record=record, resume=False, sampler=sampler,
                                  steps=steps, prompts_per_step=prompts, generations=generations,
                                  max_completion_length=4096, env_config=ENV_CONFIG, seed=seed)
        records = phases.read(tmp)
    per_step = {k: statistics.mean(r[k] for r in records) for k in ("step_s", *phases.PHASES, "grade_s")}
    return {"wall_s": out.wall_s, "recorder_s": out.recorder_s, "rollouts": steps * prompts * generations,
            "written": out.written, "phases": per_step}


def measure_trl(*, policy: str = "scripted", student=None, prompts: int = 2, generations: int = 2, steps: int = 2,
                repeats: int = 2, seed: int = 0) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    from composer import zoo
    from composer.env.defences import probes

    if student is None:
        student = zoo.zoo("smoke")["student"] if policy == "model" else None
    if student is None:
        from composer.models import tiny_model

        student = tiny_model()
    instances, _ = probes.rewarded(prompts, seed=seed)
    runs = {True: [], False: []}
    for _ in range(repeats):
        for record in (False, True):  # alternate, so drifting machine load hits both arms alike
            runs[record].append(_trl_run(student, instances, record=record, policy=policy, steps=steps,
                                         prompts=prompts, generations=generations, seed=seed))
    with_rec = statistics.median(r["wall_s"] for r in runs[True])
    without = statistics.median(r["wall_s"] for r in runs[False])
    n = steps * prompts * generations
    if any(r["written"] != n for r in runs[True]):
        raise RuntimeError(f"the recorder wrote {[r['written'] for r in runs[True]]} rollouts, expected {n} each")
    return {
        "trl_rollouts_per_s": n / with_rec,
        "trl_rollouts_per_s_without_recorder": n / without,
        "recorder_overhead": with_rec / without,
        "recorder_s_per_rollout": statistics.median(r["recorder_s"] for r in runs[True]) / n,
        "recorder_share_of_wall": statistics.median(r["recorder_s"] / r["wall_s"] for r in runs[True]),
        "trl_phases_s_per_step": {k: statistics.median(r["phases"][k] for r in runs[True])
                                  for k in runs[True][0]["phases"]},
        "trl_wall_s_with_recorder": [round(r["wall_s"], 3) for r in runs[True]],
        "trl_wall_s_without_recorder": [round(r["wall_s"], 3) for r in runs[False]],
    }


def measure_verifiers(*, rollouts: int = 8, concurrency: int = 4) -> dict:
    """verifiers (spike 002b's substrate): rollouts/s of the same scripted work through verifiers' harness, MCP tool
    server and eval client against the local server (composer.collection.prime.verifiers_rollouts_per_s)."""
    from composer.collection import prime

    return {"verifiers_rollouts_per_s": prime.verifiers_rollouts_per_s(rollouts, concurrency=concurrency)}


def measure(*, policy: str = "scripted", student=None, prompts: int = 2, generations: int = 2, steps: int = 2,
            repeats: int = 2, seed: int = 0) -> dict:
    start, machine_at_start = time.perf_counter(), machine()
    result = {"policy": policy, "rollouts_per_run": steps * prompts * generations, "repeats": repeats,
              **measure_trl(policy=policy, student=student, prompts=prompts, generations=generations, steps=steps,
                            repeats=repeats, seed=seed),
              **measure_verifiers(rollouts=steps * prompts * generations),
              "target_recorder_overhead": TARGET_OVERHEAD, **machine_at_start, "platform": platform.platform()}
    result["meets_target"] = result["recorder_overhead"] <= TARGET_OVERHEAD
    result["bench_s"] = round(time.perf_counter() - start, 1)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer bench rollouts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", choices=("scripted", "model"), default="scripted")
    parser.add_argument("--student", default=None, help="checkpoint path (default: tiny model / smoke zoo student)")
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--generations", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.prompts, args.generations, args.steps, args.repeats) < 1:
        parser.error("--prompts, --generations, --steps and --repeats must be >= 1")
    result = measure(policy=args.policy, student=args.student, prompts=args.prompts, generations=args.generations,
                     steps=args.steps, repeats=args.repeats, seed=args.seed)
    print(f"{'':<28}{'with recorder':>16}{'without':>12}")
    print(f"{'wall s per run (each)':<28}{str(result['trl_wall_s_with_recorder']):>16}"
          f"{str(result['trl_wall_s_without_recorder']):>12}")
    print(f"verifiers rollouts/s: {result['verifiers_rollouts_per_s']:.3f}")
    print(f"TRL rollouts/s: {result['trl_rollouts_per_s']:.3f}; recorder overhead {result['recorder_overhead']:.3f}x "
          f"(target <= {TARGET_OVERHEAD}); recorder {1000 * result['recorder_s_per_rollout']:.1f} ms/rollout, "
          f"{100 * result['recorder_share_of_wall']:.2f}% of the wall-clock")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
