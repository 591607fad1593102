"""The coding environment's throughput: tool steps per second, sandboxed test runs included, on a scripted mix.

    python -m composer bench env [--tasks 6] [--episodes 24] [--workers 2] [--seed 0]

    from composer.bench.env import measure
    result = measure(n_tasks=6, episodes=24, workers=2)    # the dict printed as the last stdout line

An episode is what a competent agent does on an embedded task: view the buggy module, run_tests,
edit (the gold fix from the task's patch on even episodes, a harmless wrong edit on odd ones),
run_tests, submit. That is 5 steps (more when a gold patch has several hunks), 3 of which run a
sandboxed pytest: the two run_tests and submit's grading run on a fresh copy. `workers` episodes
run at once, each in its own CodingEnv, as a trainer's rollouts would.

  env_steps_per_s             steps per wall-clock second, `workers` episodes at a time (reset time
                              is included, resets are not counted as steps). Target: >= 20 on 2 cores.
  env_steps_per_s_sequential  the same, one episode at a time
  tool_ms_p50                 median latency of each tool
  pytest_breakdown_ms         where one pytest run goes (medians): starting the sandboxed interpreter
                              (`python -c pass`), + importing pytest, the whole run_pytest
The rewards are checked as well: every gold episode must get 1.0 and every wrong one 0.0 (else exit 1).

Results (2026-11-30, the 2-core dev VM, root-ns isolation, defaults; a busy machine halves them):
env_steps_per_s 7.8, sequential 6.0: below the target of 20. Sandboxed pytest runs are >99% of
step time (the file tools take ~1 ms); one run costs ~250 ms of CPU: ~60 ms to start the
sandboxed interpreter (unshare, setpriv, chown of the copy, Python start), ~100 ms to import
pytest, ~90 ms for pytest itself (config, plugins, collection, 13 tests). At 0.6 runs per step
and 2 cores, 20 steps/s needs <= ~165 ms per run with perfect scaling (measured: ~1.5x on 2 cores).
Tried: a warm worker per episode (prototype, not shipped): a pytest zygote started inside
sandbox.run_python (same namespaces, uid drop and rlimits), pid 1 of its PID namespace, forking
one child per run_tests and SIGKILLing every other process of the namespace after each run, so
the per-run cleanup guarantee holds; the grading run of submit stays a cold, fresh sandbox.
Measured: ~100 ms per warm run vs ~250-350 ms cold, ~250 ms to start the zygote, so on this
mix (two run_tests per episode) episodes got ~25% faster; it pays off with more run_tests per
episode. It is not shipped because it re-implements run_pytest's outcome rules and session
ownership outside sandbox.py; it belongs there (a `sandbox.PytestWorker`). Reaching 20 steps/s
on this mix also needs the grading run warm: a trusted zygote that forks into fresh namespaces
and a fresh uid per run, i.e. the sandbox's own start-up, not the environment's.
"""

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from composer.env import sandbox, tasks
from composer.env.environment import CodingEnv, EnvConfig, gold_edits

TARGET_STEPS_PER_S = 20


def _episode(env: CodingEnv, record: dict, gold: bool) -> tuple[list[tuple[str, float]], float]:
    """Play one scripted episode; ([(tool, seconds) per step], reward)."""
    fix = gold_edits(record)
    if not gold:  # a comment above the buggy lines: the bug stays, every test still collects
        fix = [{"path": fix[0]["path"], "start": fix[0]["start"], "end": fix[0]["start"] - 1,
                "new_text": "# looked here\n"}]
    env.reset(instance=record)
    plan = [("view", {"path": fix[0]["path"]}), ("run_tests", {}), *(("edit", e) for e in fix), ("run_tests", {}),
            ("submit", {})]
    timings, obs = [], None
    for tool, args in plan:
        start = time.perf_counter()
        obs = env.call(tool, **args)
        timings.append((tool, time.perf_counter() - start))
        if not obs.info.ok:
            raise RuntimeError(f"{record['instance_id']}: {tool} failed: {obs.info.error}")
    return timings, obs.reward


def _run(records: list[dict], episodes: int, workers: int, config: EnvConfig) -> dict:
    jobs = [(records[i % len(records)], i % 2 == 0) for i in range(episodes)]

    def worker(share):
        env = CodingEnv(config=config)
        try:
            return [(gold, *_episode(env, record, gold)) for record, gold in share]
        finally:
            env.close()

    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        done = [r for rs in pool.map(worker, [jobs[w::workers] for w in range(workers)]) for r in rs]
    wall = time.perf_counter() - start
    steps = [t for _, timings, _ in done for t in timings]
    return {"episodes": episodes, "workers": workers, "steps": len(steps), "wall_s": wall,
            "steps_per_s": len(steps) / wall,
            "gold_rewards": [r for gold, _, r in done if gold], "wrong_rewards": [r for gold, _, r in done if not gold],
            "timings": steps}


def _pytest_breakdown(record: dict, repeats: int = 3) -> dict:
    tests = json.loads(record["FAIL_TO_PASS"]) + json.loads(record["PASS_TO_PASS"])
    with tempfile.TemporaryDirectory(prefix="composer-bench-env-") as tmp:
        repo = tasks.materialize(record, Path(tmp) / "repo")

        def median_ms(fn):
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            return statistics.median(times) * 1e3

        return {"python_start": median_ms(lambda: sandbox.run_python(repo, ["-c", "pass"])),
                "import_pytest": median_ms(lambda: sandbox.run_python(repo, ["-c", "import pytest"])),
                "run_pytest": median_ms(lambda: sandbox.run_pytest(repo, tests))}


def measure(n_tasks: int = 6, episodes: int = 24, workers: int = 2, seed: int = 0) -> dict:
    records = tasks.generate(n_tasks, seed=seed)
    config = EnvConfig()
    _run(records[:1], 1, 1, config)  # warm-up: imports, the sandbox's isolation probe, page cache
    concurrent = _run(records, episodes, workers, config)
    sequential = _run(records, max(2, episodes // workers), 1, config)
    by_tool = defaultdict(list)
    for tool, seconds in concurrent["timings"] + sequential["timings"]:
        by_tool[tool].append(seconds)
    ok = all(r == 1.0 for r in concurrent["gold_rewards"] + sequential["gold_rewards"]) and \
        all(r == 0.0 for r in concurrent["wrong_rewards"] + sequential["wrong_rewards"])
    pytest_runs = sum(len(by_tool[t]) for t in ("run_tests", "submit"))
    total = sum(sum(v) for v in by_tool.values())
    return {
        "env_steps_per_s": concurrent["steps_per_s"],
        "env_steps_per_s_sequential": sequential["steps_per_s"],
        "target_steps_per_s": TARGET_STEPS_PER_S,
        "meets_target": concurrent["steps_per_s"] >= TARGET_STEPS_PER_S,
        "rewards_ok": ok,
        "tool_ms_p50": {t: statistics.median(v) * 1e3 for t, v in sorted(by_tool.items())},
        "time_share_pytest": sum(sum(by_tool[t]) for t in ("run_tests", "submit")) / total,
        "pytest_runs_per_step": pytest_runs / sum(len(v) for v in by_tool.values()),
        "pytest_breakdown_ms": _pytest_breakdown(records[0]),
        "concurrent": {k: v for k, v in concurrent.items() if k != "timings"},
        "sequential": {k: v for k, v in sequential.items() if k != "timings"},
        "tasks": n_tasks,
        "isolation": sandbox.isolation()["mode"],
        "cpus": len(os.sched_getaffinity(0)),
        "machine": platform.processor() or platform.machine(),
        "seed": seed,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer bench env", description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=6, help="embedded tasks generated (default 6)")
    parser.add_argument("--episodes", type=int, default=24, help="episodes timed with --workers at once (default 24)")
    parser.add_argument("--workers", type=int, default=2, help="episodes at once (default 2, one per core here)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = measure(args.tasks, args.episodes, args.workers, args.seed)
    c, b = result["concurrent"], result["pytest_breakdown_ms"]
    print(f"env_steps_per_s   {result['env_steps_per_s']:6.1f}  ({c['steps']} steps, {c['episodes']} episodes, "
          f"{c['workers']} at once; target >= {TARGET_STEPS_PER_S})")
    print(f"  one at a time   {result['env_steps_per_s_sequential']:6.1f}")
    print("  tool p50 ms     " + ", ".join(f"{t} {ms:.0f}" for t, ms in result["tool_ms_p50"].items()))
    print(f"  pytest runs     {result['pytest_runs_per_step']:.2f} per step, {result['time_share_pytest']:.0%} of "
          f"step time; one run: interpreter start {b['python_start']:.0f} ms, +import pytest "
          f"{b['import_pytest']:.0f} ms, whole run {b['run_pytest']:.0f} ms")
    if not result["rewards_ok"]:
        print("error: a gold episode was not rewarded 1.0 or a wrong one not 0.0")
    print(json.dumps(result))
    return 0 if result["rewards_ok"] else 1
