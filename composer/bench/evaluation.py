"""Checkpoint evaluation: episodes in lockstep (one batched decode a turn) against one episode at a time, or
the lockstep loop against vLLM.

    python -m composer bench evaluation [--profile report|smoke] [--tasks 40] [--batch 16]
    python -m composer bench evaluation --engine vllm --model teacher-large   # vLLM (its CPU build on CPU)

    from composer.bench.evaluation import measure
    result = measure(profile="smoke", tasks=2, batch=2)   # the dict printed as the last stdout line

The zoo student of `profile` (trained if not cached) is evaluated greedily on the profile's first `tasks` test
tasks as 004 and the zoo evaluate a checkpoint (policies.evaluate: k=1, temperature 0, the zoo's environment and
max_new_tokens), twice in this process: one episode at a time (batch_size 1: each turn its own prefill, decode and
environment step) and `batch` episodes in lockstep (policies.rollouts). Keys of the JSON line:
  speedup       one-at-a-time wall-clock / lockstep wall-clock (each includes loading the model)
  same_scores   the fraction of tasks whose pass@1 is the same both ways: greedy tokens can differ at a near-tie,
                since batching changes the order of float sums
  one_at_a_time, lockstep   wall_s, pass@1, scores per task, turns taken, episodes submitted
With --engine vllm the pair is the lockstep loop (`batch` episodes) and vLLM (every episode in one batch): keys
lockstep and vllm, `speedup` lockstep wall-clock / vLLM's, each including the model's load (vLLM's engine start
too). vLLM's CPU attention has kernels for head sizes 32, 64, 80, ... only: on CPU evaluate the report zoo's
teacher-large (32), not its student (24). A ratio measured in one run, reported, not a target.
"""

import argparse
import json
import sys
import time

from composer.bench import machine


def _run(student, records, profile, batch: int | None, engine: str = "transformers") -> dict:
    from composer import policies

    start = time.perf_counter()
    scores, runs = policies.evaluate(student, records, k=1, temperature=0.0, env_config=profile.env,
                                     max_new_tokens=profile.max_new_tokens, return_rollouts=True, batch_size=batch,
                                     engine=engine)
    wall = time.perf_counter() - start
    return {"batch_size": batch, "wall_s": wall, "scores": scores, "pass1": sum(scores.values()) / len(scores),
            "turns": sum(info["steps"] for *_, info in runs), "submitted": sum(info["submitted"] for *_, info in runs)}


def measure(*, profile: str = "report", tasks: int = 40, batch: int = 16, engine: str = "transformers",
            model: str = "student") -> dict:
    """Run the benchmark; return the dict `main` prints as its last stdout line (see the module docstring)."""
    from composer import policies, zoo

    if profile not in zoo.PROFILES:
        raise ValueError(f"profile must be one of {tuple(zoo.PROFILES)}, got {profile!r}")
    if tasks < 1 or batch < 2:
        raise ValueError(f"tasks must be >= 1 and batch >= 2, got tasks={tasks}, batch={batch}")
    if engine not in policies.ENGINES:
        raise ValueError(f"engine must be one of {policies.ENGINES}, got {engine!r}")
    at_start = machine()
    spec = zoo.PROFILES[profile]
    records = zoo.split_tasks(spec, "test")[:tasks]
    path = zoo.model(profile, model)
    ways = ({"lockstep": (batch, "transformers"), "vllm": (None, "vllm")} if engine == "vllm" else
            {"one_at_a_time": (1, "transformers"), "lockstep": (batch, "transformers")})
    runs = {name: _run(path, records, spec, *way) for name, way in ways.items()}
    first, second = runs.values()
    same = sum(first["scores"][t] == second["scores"][t] for t in first["scores"]) / len(first["scores"])
    return {"speedup": first["wall_s"] / second["wall_s"], "same_scores": same, "profile": profile, "model": model,
            "engine": engine, "tasks": len(records), **runs, **at_start}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer bench evaluation", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="report", help="zoo profile whose student is evaluated (report, smoke)")
    parser.add_argument("--tasks", type=int, default=40, help="test tasks (004 evaluates 40)")
    parser.add_argument("--batch", type=int, default=16, help="episodes in lockstep (policies.evaluate's default)")
    parser.add_argument("--engine", default="transformers", help="vllm: the lockstep loop against vLLM")
    parser.add_argument("--model", default="student", help="the zoo model evaluated (e.g. teacher-large)")
    args = parser.parse_args(argv)
    result = measure(profile=args.profile, tasks=args.tasks, batch=args.batch, engine=args.engine, model=args.model)
    for name in ("one_at_a_time", "lockstep", "vllm"):
        r = result.get(name)
        if r:
            print(f"{name:<14} batch {r['batch_size'] or 'all':>3}  {r['wall_s']:7.1f} s  pass@1 {r['pass1']:.3f}  "
                  f"{r['turns']} turns  {r['submitted']} submitted")
    print(f"speedup {result['speedup']:.2f}x  same scores on {result['same_scores']:.0%} of {result['tasks']} tasks")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
