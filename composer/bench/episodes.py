"""One GRPO step's tool calls and gradings with TRL's serial tool loop against composer.episodes' concurrent one.

    python -m composer bench episodes [--episodes 16] [--generations 2] [--repeats 1] [--wait-s 5] [--workers 16]

    from composer.bench.episodes import measure
    result = measure(episodes=2, wait_s=0.5)          # the dict printed as the last stdout line

One generation batch of `episodes` rollouts in one process (episodes / generations embedded tasks, as 004 and 002a
build it: collect.build_trainer, TRLCodingEnv), the sampler scripted (collect.scripted_sampler), so both arms replay
the same completions and generation is excluded: every episode edits and submits, so each has a real grading (half
the tasks with the gold edits, resolved; half with an edit that fixes nothing, graded unresolved). Timed: the wall-
clock of TRL's tool loop less the scripted sampler's time in it, i.e. the step's tool calls and gradings; with
concurrent_tools False (TRL's loop) and True (composer.episodes), alternately, `repeats` times each.

Two cases:
  grading   the embedded environment as it is: a grading is a sandboxed pytest run (fork server) plus the host's
            Python work (materialize, tampering scan, canaries): it computes, so on a few cores the concurrent arm
            is bound by CPU, not by waiting. cpu_s (this process's CPU plus the fork server's runs) shows the bound:
            concurrent_s cannot go below cpu_s / cpus.
  waiting   the same, each submit first waiting wait_s seconds (time.sleep): a SIMULATED stand-in for a container's
            grading, which mostly waits on podman and the instance's own test run (live: ~60 s a submission).

Results (2026-12-05, the shared 2-core VM, defaults, --repeats 3): grading, machine idle (load 0.4 at start):
serial 1.55 s, concurrent 0.86 s, ratio 0.55: CPU-bound, 1.4-1.6 s of CPU for the 16 gradings, so 2 cores floor the
concurrent arm at ~0.8 s (ratio ~0.5); waiting (5 s simulated per submit): 83.5 s vs 6.2 s, ratio 0.075 (the floor:
one wait plus the CPU over 2 cores). Rewards (8 of 16 resolved) and every tool message equal in both arms. Under load
(another run, load 4.3-4.9, --repeats 2) the grading case read 8.0 s vs 2.0 s, ratio 0.25: the serial arm waited
for a core, and 16 threads take a bigger share of a busy machine; that is not the concurrency's own gain.

Keys of the JSON line: serial_s, concurrent_s, ratio (concurrent / serial, medians) and rewards_equal,
observations_equal (every tool message the same in both arms) for the grading case, the same under "waiting" with
wait_s, plus cpu_s per arm, resolved (rewards summed), episodes, workers and the machine (load average at start and
end: the machine is shared).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from composer.bench import machine


def _plans(records: list[dict]) -> dict:
    from composer.collection.collect import tool_call_text
    from composer.env.environment import gold_edits

    plans = {}
    for k, r in enumerate(records):
        edits = gold_edits(r)
        if k % 2:  # an edit that fixes nothing: graded, unresolved
            edits = [dict(path=edits[0]["path"], start=1, end=0, new_text="# looked here\n")]
        plans[r["instance_id"]] = [*(tool_call_text("edit", **e) for e in edits), tool_call_text("submit")]
    return plans


def _waiting_env(wait_s: float):
    from composer.env.environment import TRLCodingEnv

    class WaitingEnv(TRLCodingEnv):
        def submit(self) -> str:
            """Finish the task: your changes are graded by the task's tests. Call it once, when done."""
            time.sleep(wait_s)  # the container's wait, simulated
            return super().submit()

    return WaitingEnv


def _batch(student, records, *, generations: int, concurrent: bool, workers: int, wait_s: float | None) -> dict:
    from composer.collection import collect
    from composer.env.containment import sandbox
    from composer.env.environment import env_reward
    from composer.policies import ENV_CONFIG

    with tempfile.TemporaryDirectory(prefix="bench-episodes-") as tmp:
        trainer = collect.build_trainer(
            student, records, tmp, env_config=ENV_CONFIG, checkpoint=False, recording_env=False,
            prompts_per_step=len(records), generations=generations, max_completion_length=4096,
            max_tool_calling_iterations=8, concurrent_tools=concurrent, tool_workers=workers)
        collect.scripted_sampler(_plans(records))(trainer)
        if wait_s is not None:  # TRL reuses its pool's instances: these are the batch's environments
            for env in trainer._environment_pool[None]:
                env.env.close()
            trainer._environment_pool[None] = [_waiting_env(wait_s)(ENV_CONFIG)
                                               for _ in range(len(records) * generations)]
        clock = {"loop": 0.0, "sampler": 0.0}

        def timed(fn, key):
            def run(*args, **kwargs):
                start = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    clock[key] += time.perf_counter() - start
            return run

        trainer._tool_call_loop = timed(trainer._tool_call_loop, "loop")
        trainer._generate_single_turn = timed(trainer._generate_single_turn, "sampler")
        rows = [r for r in collect.dataset(records) for _ in range(generations)]
        cpu = time.process_time() + sandbox._FORKSERVER.children_cpu_s()
        try:
            trainer._generate_and_score_completions(rows)
            cpu = time.process_time() + sandbox._FORKSERVER.children_cpu_s() - cpu
            observations = [[m["content"] for m in e.env._ep.messages if m["role"] == "tool"]
                            for e in trainer.environments]
            rewards = env_reward(trainer.environments)
        finally:
            collect.close_environments(trainer)
    return {"tools_s": clock["loop"] - clock["sampler"], "cpu_s": cpu, "rewards": rewards,
            "observations": observations}


def _case(student, records, *, generations, repeats, workers, wait_s=None) -> dict:
    runs = {False: [], True: []}
    for _ in range(repeats):
        for concurrent in runs:
            runs[concurrent].append(_batch(student, records, generations=generations, concurrent=concurrent,
                                           workers=workers, wait_s=wait_s))
    first = runs[False][0]
    serial, concurrent = (statistics.median(r["tools_s"] for r in runs[arm]) for arm in (False, True))
    return {"serial_s": serial, "concurrent_s": concurrent, "ratio": concurrent / serial,
            "rewards_equal": all(r["rewards"] == first["rewards"] for rs in runs.values() for r in rs),
            "observations_equal": all(r["observations"] == first["observations"] for rs in runs.values() for r in rs),
            "serial_runs_s": [r["tools_s"] for r in runs[False]],
            "concurrent_runs_s": [r["tools_s"] for r in runs[True]],
            "serial_cpu_s": statistics.median(r["cpu_s"] for r in runs[False]),
            "concurrent_cpu_s": statistics.median(r["cpu_s"] for r in runs[True]),
            "resolved": sum(first["rewards"]), **({"wait_s": wait_s} if wait_s is not None else {})}


def measure(*, episodes: int = 16, generations: int = 2, repeats: int = 1, wait_s: float = 5.0,
            workers: int | None = None) -> dict:
    """Run the benchmark; return the dict `main` prints as its last stdout line (see the module docstring)."""
    if generations < 2 or episodes < generations or episodes % generations or repeats < 1 or wait_s < 0:
        raise ValueError(f"episodes must be a multiple of generations (>= 2), repeats >= 1 and wait_s >= 0; got "
                         f"episodes={episodes}, generations={generations}, repeats={repeats}, wait_s={wait_s}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from composer.episodes import WORKERS
    from composer.env.defences import probes
    from composer.models import tiny_model

    workers = workers or WORKERS
    at_start = machine()
    records, _ = probes.rewarded(episodes // generations, seed=0)
    student = tiny_model()  # it generates nothing (scripted): TRL's step needs a model
    settings = dict(generations=generations, repeats=repeats, workers=workers)
    grading = _case(student, records, **settings)
    waiting = _case(student, records, **settings, wait_s=wait_s)
    return {**{k: grading[k] for k in ("serial_s", "concurrent_s", "ratio", "rewards_equal", "observations_equal")},
            "grading": grading, "waiting": waiting, "episodes": episodes, "generations": generations,
            "repeats": repeats, "workers": workers, **at_start, "load_average_1m_at_end": os.getloadavg()[0]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer bench episodes", description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=16, help="rollouts in the process's generation batch")
    parser.add_argument("--generations", type=int, default=2, help="rollouts per task (a GRPO group)")
    parser.add_argument("--repeats", type=int, default=1, help="batches per arm and case, alternating")
    parser.add_argument("--wait-s", type=float, default=5.0, help="the waiting case's simulated wait per submit")
    parser.add_argument("--workers", type=int, default=None, help="threads of the concurrent arm (episodes.WORKERS)")
    args = parser.parse_args(argv)
    result = measure(episodes=args.episodes, generations=args.generations, repeats=args.repeats,
                     wait_s=args.wait_s, workers=args.workers)
    for case in ("grading", "waiting"):
        r = result[case]
        label = "grading" if case == "grading" else f"waiting (simulated {r['wait_s']:g} s per submit)"
        print(f"{label}: serial {r['serial_s']:.2f} s, concurrent {r['concurrent_s']:.2f} s, ratio {r['ratio']:.3f}; "
              f"CPU {r['serial_cpu_s']:.1f} / {r['concurrent_cpu_s']:.1f} s; rewards equal {r['rewards_equal']}, "
              f"observations equal {r['observations_equal']}, {r['resolved']:g} of {result['episodes']} resolved")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
