"""GRPO steps with TRL's own tool-loop generation against composer.turn_cache's kept KV caches.

    python -m composer bench turns [--profile report|smoke] [--tasks 2] [--generations 4] [--repeats 2]

    from composer.bench.turns import measure
    result = measure(profile="smoke", tasks=1, generations=2, repeats=1)   # the dict printed as the last stdout line

One GRPO optimizer step of the zoo student of `profile` (trained if not cached; the report student makes tool
calls, so its rollouts have several turns) on the first `tasks` train tasks x `generations` rollouts, as 004 trains
(collect.build_trainer, the zoo's environment, up to 8 turns), through TRL's generation (`generate` on the whole
conversation every turn) and through turn_cache, alternately, `repeats` times each. Both decode greedily
(do_sample False), so both arms sample the same tokens up to near-ties and do the same work: the ratio is the
cache's effect alone (GRPO's loss and backward are in both).

Results (2026-12-03, idle 2-core VM, defaults): 33.2 s vs 13.2 s a step, 2.52x; 462.5 completion tokens and 12.0
tool calls per rollout in both arms, the completions not all identical (near-ties). Keys of the JSON line:
  speedup            median step wall-clock with TRL's generation / median with turn_cache
  same_completions   whether every run of both arms generated the same completion tokens: greedy tokens can
                     differ at a near-tie, since turn_cache's batches sum floats in another order than generate's
  stock, cached      step wall-clock per run, their median, completion tokens and tool calls per rollout
"""

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile

from composer.bench import machine


def _step(student, records, env, *, generations: int, cached: bool) -> dict:
    from composer.collection import collect

    with tempfile.TemporaryDirectory() as tmp:
        trainer = collect.build_trainer(
            student, records, tmp, env_config=env, checkpoint=False, recording_env=False, steps=1,
            prompts_per_step=len(records), generations=generations, max_completion_length=4096,
            max_tool_calling_iterations=12, learning_rate=1e-4, generation_kwargs={"do_sample": False},
            turn_cache=cached)
        generated = []
        generate = trainer._generate

        def keep(prompts):
            out = generate(prompts)
            generated.append(out[1])  # completion ids, in rollout order
            return out

        trainer._generate = keep
        wall = collect.train_timed(trainer)
    log = trainer.state.log_history[0]
    return {"wall_s": wall, "completions": generated, "mean_completion_tokens": log["completions/mean_length"],
            "tool_calls_per_rollout": log["tools/call_frequency"]}


def measure(*, profile: str = "report", tasks: int = 2, generations: int = 4, repeats: int = 2) -> dict:
    """Run the benchmark; return the dict `main` prints as its last stdout line (see the module docstring)."""
    from composer import zoo

    if profile not in zoo.PROFILES:
        raise ValueError(f"profile must be one of {tuple(zoo.PROFILES)}, got {profile!r}")
    if tasks < 1 or generations < 2 or repeats < 1:
        raise ValueError(f"tasks and repeats must be >= 1 and generations >= 2 (a GRPO group), got tasks={tasks}, "
                         f"generations={generations}, repeats={repeats}")
    at_start = machine()
    spec = zoo.PROFILES[profile]
    records = zoo.split_tasks(spec, "train")[:tasks]
    env = dataclasses.replace(spec.env, max_steps=8)
    student = zoo.model(profile, "student")
    runs = {"stock": [], "cached": []}
    for _ in range(repeats):
        for arm in runs:
            runs[arm].append(_step(student, records, env, generations=generations, cached=arm == "cached"))
    first = runs["stock"][0]["completions"]
    same = all(r["completions"] == first for arm in runs.values() for r in arm)
    out = {arm: {"wall_s": [r["wall_s"] for r in rs], "median_s": statistics.median(r["wall_s"] for r in rs),
                 "mean_completion_tokens": rs[0]["mean_completion_tokens"],
                 "tool_calls_per_rollout": rs[0]["tool_calls_per_rollout"]} for arm, rs in runs.items()}
    return {"speedup": out["stock"]["median_s"] / out["cached"]["median_s"], "same_completions": same,
            "profile": profile, "tasks": len(records), "generations": generations, "repeats": repeats, **out,
            **at_start}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer bench turns", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="report", help="zoo profile whose student trains (report, smoke)")
    parser.add_argument("--tasks", type=int, default=2, help="train tasks: prompts of the GRPO step (004: 2)")
    parser.add_argument("--generations", type=int, default=4, help="rollouts per task (004: 4)")
    parser.add_argument("--repeats", type=int, default=2, help="steps per arm, alternating")
    args = parser.parse_args(argv)
    result = measure(profile=args.profile, tasks=args.tasks, generations=args.generations, repeats=args.repeats)
    for arm in ("stock", "cached"):
        r = result[arm]
        print(f"{arm:<7} median {r['median_s']:6.1f} s  runs {', '.join(f'{s:.1f}' for s in r['wall_s'])}  "
              f"{r['mean_completion_tokens']:.0f} completion tokens and {r['tool_calls_per_rollout']:.1f} tool calls "
              "per rollout")
    print(f"speedup {result['speedup']:.2f}x  same completions: {result['same_completions']}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
