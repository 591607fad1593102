"""The coding environment's throughput: tool steps per second, sandboxed test runs included, on a scripted mix.

    python -m composer bench env [--tasks 6] [--episodes 24] [--workers 2] [--seed 0] [--no-worker]
    python -m composer bench env --backend container [--episodes 6] [--workers 3]   # a real instance, podman

    from composer.bench.env import measure
    result = measure(n_tasks=6, episodes=24, workers=2)    # the dict printed as the last stdout line

An episode is what a competent agent does on an embedded task: view the buggy module, run_tests,
edit (the gold fix from the task's patch on even episodes, a harmless wrong edit on odd ones),
run_tests, submit. That is 5 steps (more when a gold patch has several hunks), 3 of which run a
sandboxed pytest: the two run_tests and submit's grading run, each in a fresh sandbox started from
the fork server where there is one (composer.env.containment.forkserver; else run_tests go through the episode's
warm PytestWorker). `workers` episodes run at once, each in its own CodingEnv, as a trainer's
rollouts would.

  env_steps_per_s             steps per wall-clock second, `workers` episodes at a time (reset time
                              is included, resets are not counted as steps). Target: >= 20 on 2 cores.
  env_steps_per_s_sequential  the same, one episode at a time
  env_steps_per_s_worker      the same episodes with run_tests through a per-episode PytestWorker
                              (EnvConfig(warm_tests=True)), alternated with the default in chunks so that
                              other people's load falls on both alike; worker_speedup = its ratio
  sandbox_overhead            step time with the full containment over step time of the same episodes,
                              same scheme (fork server), in sandbox.forced_mode("pid-ns") (a PID namespace
                              and nothing else: no mount namespace, uid, cgroup or network namespace),
                              interleaved in the same run. Target: <= 1.3
  grading_s_per_submission    median seconds of submit (a cold pytest run in a fresh sandbox)
  cpu_ms_per_step[_worker]    CPU per step, this process, every sandbox it reaped and the fork server's runs: the comparison
                              that holds on a shared machine, where wall-clock figures swing 2x
  tool_ms_p50                 median latency of each tool
  pytest_breakdown_ms         where one pytest run goes (medians): starting the sandboxed interpreter
                              (`python -c pass`), + importing pytest, the whole cold run_pytest; the
                              worker's start + first run, and a later warm run
The rewards are checked as well: every gold episode must get 1.0 and every wrong one 0.0 (else exit 1).

Results (2026-11-30, the 2-core dev VM, root-ns isolation, defaults):
Before the worker: env_steps_per_s 7.8, sequential 6.0 (an idle machine). Sandboxed pytest runs
are >99% of step time (the file tools take ~1 ms); a cold run costs ~250 ms of CPU: ~40 ms
sandbox and interpreter start, ~120 ms to import pytest, ~70 ms for pytest itself (config,
collection, 13 tests), plus ~30 ms that subprocess spent fork()ing the whole host process for
its preexec_fn (now util-linux prlimit sets the rlimits and subprocess uses vfork).
With the worker (same day, machine loaded 3-4x by other users, so wall-clock figures are low and
noisy; the CPU figures are not), defaults: env_steps_per_s 5.2 vs 4.2 cold in the same run (1.24x;
other runs 1.31x and 0.98x, as the load swung), CPU per step 122 ms warm vs 156 ms cold (-22%;
a small run: 115 vs 143).
Idle machine, same day, two runs: env_steps_per_s 18.7 and 18.8 warm vs 14.3 and 13.9 cold (1.31x,
1.36x); CPU per step 101-102 ms warm vs 135-139 ms cold. (The 7.8 above was measured under load.)
CPU per pytest run (getrusage, same task): warm ~80 ms, cold ~260 ms (3.2x); the worker's start
plus its first run ~235 ms, nearly a cold run (its interpreter and `import pytest`). So per
episode the worker saves the start-up of every run_tests after the first: one on this mix, more
for agents that test often (5 run_tests: ~555 ms of CPU instead of ~1300).
What was left per episode then was the cold grading run and the worker's start (~2 x 175 ms of
interpreter + import pytest). Grading now runs through the worker too, on its fresh copy
(PytestWorker.run(ids, repo=copy)): a new child of a server that has imported pytest and never
run task code, so it is as fresh as a cold run but for the interpreter start (decision and its
limits: composer.env.environment's docstring). Idle machine, 2026-11-30 (session 3), three runs:
env_steps_per_s 24.3 / 20.7 / 20.4 warm vs 13.1 / 10.7 / 12.2 cold (1.85x / 1.95x / 1.67x), CPU per
step 77 / 89 / 90 ms warm vs 147 / 166 / 156 cold: the target is met, by a thin margin in two runs.
What remains is the worker's own start (~175 ms per episode); a trusted zygote outside the
sandbox that enters fresh namespaces, uid and rlimits itself would remove it.

2026-12-01 (session 5), containment: every run in its own mount namespace, uid, cgroup. First
with bubblewrap alone and grading cold in a fresh sandbox: 15.5 / 16.6 steps/s (CPU 111-117 ms per step),
against 24.4 / 20.2 for the old code on the same machine that day, because each submission paid a cold
interpreter and `import pytest` (~265 ms). That zygote now exists (composer.env.containment.forkserver): every root
pytest run, run_tests and grading alike, forks from it into a fresh sandbox, so no episode starts a worker.
Idle machine, the old code then the new back to back: 20.2 vs 25.6 steps/s; two more runs of the new:
27.0 and 24.2 (one at a time 16.4 / 13.6; with a per-episode worker instead 19.1 / 16.1); CPU per step
61-68 ms; grading 0.11-0.13 s per submission; sandbox_overhead 1.27 and 1.11 against a PID namespace alone
(1.27 and 1.34 before the run, rather than its waiting parent, joined the memory cgroup: the cgroup then
waited for the parent's reaping before it could be removed). What containment still costs, measured per
pytest run (13 tests, medians of 25 interleaved): 111 ms contained vs 107 ms in a PID namespace alone; the
memory cgroup is ~15 ms of a run (the kernel charges each copy-on-write page of the forked interpreter).
"""

import argparse
import dataclasses
import json
import os
import resource
import statistics
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

from composer.bench import machine
from composer.paths import ROOT
from composer.env.containment import sandbox
from composer.env.defences import probes
from composer.env.embedded import tasks
from composer.env.containment.worker import PytestWorker
from composer.env.environment import CodingEnv, EnvConfig, gold_edits

TARGET_STEPS_PER_S = 20
TARGET_OVERHEAD = 1.3


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


def _jobs(records: list[dict], episodes: int) -> list[tuple[dict, bool]]:
    return [(records[i % len(records)], i % 2 == 0) for i in range(episodes)]


def _run(records: list[dict], episodes: int, workers: int, config: EnvConfig) -> dict:
    return _play(_jobs(records, episodes), workers, config)


def _play(jobs: list[tuple[dict, bool]], workers: int, config: EnvConfig, mode: str | None = None) -> dict:
    if mode is not None:
        with sandbox.forced_mode(mode):
            return _play(jobs, workers, config)

    def worker(share):
        env = CodingEnv(config=config)
        try:
            return [(gold, *_episode(env, record, gold)) for record, gold in share]
        finally:
            env.close()

    start, cpu = time.perf_counter(), _cpu_s()
    with ThreadPoolExecutor(workers) as pool:
        done = [r for rs in pool.map(worker, [jobs[w::workers] for w in range(workers)]) for r in rs]
    wall, cpu = time.perf_counter() - start, _cpu_s() - cpu
    steps = [t for _, timings, _ in done for t in timings]
    return {"episodes": len(jobs), "workers": workers, "steps": len(steps), "wall_s": wall, "cpu_s": cpu,
            "steps_per_s": len(steps) / wall,
            "gold_rewards": [r for gold, _, r in done if gold], "wrong_rewards": [r for gold, _, r in done if not gold],
            "timings": steps}


def _cpu_s() -> float:
    """CPU seconds of this process (all threads) and of every descendant it has reaped: each sandboxed run
    (unshare reaps the sandbox's init, which reaps its own children), a worker's server once closed, and
    patch. Unlike wall-clock time, it does not grow when other people load the machine."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime + sandbox._FORKSERVER.children_cpu_s()


def _merge(parts: list[dict]) -> dict:
    """Several _play results as one (their steps, wall-clock and CPU times added up)."""
    steps, wall = sum(p["steps"] for p in parts), sum(p["wall_s"] for p in parts)
    return {"episodes": sum(p["episodes"] for p in parts), "workers": parts[0]["workers"], "steps": steps,
            "wall_s": wall, "cpu_s": sum(p["cpu_s"] for p in parts), "steps_per_s": steps / wall,
            **{k: [x for p in parts for x in p[k]] for k in ("gold_rewards", "wrong_rewards", "timings")}}


def _interleaved(records: list[dict], episodes: int, workers: int, configs: list[tuple[EnvConfig, str | None]],
                 rounds: int = 4) -> list[dict]:
    """The same episodes under each (config, sandbox mode), alternating in `rounds` chunks, so that load from
    other processes of a shared machine falls on every one alike."""
    jobs = _jobs(records, episodes)
    chunks = [jobs[i::rounds] for i in range(rounds) if jobs[i::rounds]]
    parts = [[] for _ in configs]
    for chunk in chunks:
        for part, (config, mode) in zip(parts, configs):
            part.append(_play(chunk, workers, config, mode))
    return [_merge(part) for part in parts]


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

        with PytestWorker(repo) as worker:

            def restart_and_run():
                worker._state.stop_server()  # a cold start of the worker's server, then its first run
                worker.run(tests)

            return {"python_start": median_ms(lambda: sandbox.run_python(repo, ["-c", "pass"])),
                    "import_pytest": median_ms(lambda: sandbox.run_python(repo, ["-c", "import pytest"])),
                    "run_pytest": median_ms(lambda: sandbox.run_pytest(repo, tests)),
                    "worker_start_and_run": median_ms(restart_and_run),
                    "worker_run": median_ms(lambda: worker.run(tests))}


def measure(n_tasks: int = 6, episodes: int = 24, workers: int = 2, seed: int = 0, compare_worker: bool = True) -> dict:
    start = machine()
    records, _ = probes.rewarded(n_tasks, seed=seed)
    config, worker_config = EnvConfig(), EnvConfig(warm_tests=True)
    _run(records[:1], 1, 1, config)  # warm-up: imports, the sandbox's isolation probe, page cache
    contained = sandbox.isolation()["mode"] == "root-ns"
    # the pid-ns baseline prices containment; its rewards train nothing, so it opts in to grading uncontained
    configs = [(config, None)] + ([(worker_config, None)] if compare_worker else []) + \
        ([(dataclasses.replace(config, grade_uncontained=True), "pid-ns")] if contained else [])
    runs = _interleaved(records, episodes, workers, configs)
    concurrent = runs[0]
    cold = runs[1] if compare_worker else None
    bare = runs[-1] if contained else None
    sequential = _run(records, max(2, episodes // workers), 1, config)
    by_tool = defaultdict(list)
    for tool, seconds in concurrent["timings"] + sequential["timings"]:
        by_tool[tool].append(seconds)
    runs = [concurrent, sequential] + ([cold] if cold else []) + ([bare] if bare else [])
    ok = all(r == 1.0 for run in runs for r in run["gold_rewards"]) and \
        all(r == 0.0 for run in runs for r in run["wrong_rewards"])
    pytest_runs = sum(len(by_tool[t]) for t in ("run_tests", "submit"))
    total = sum(sum(v) for v in by_tool.values())
    return {
        "env_steps_per_s": concurrent["steps_per_s"],
        "env_steps_per_s_sequential": sequential["steps_per_s"],
        # the same episodes with run_tests through a per-episode PytestWorker (warm_tests=True), interleaved
        "env_steps_per_s_worker": cold["steps_per_s"] if cold else None,
        "worker_speedup": cold["steps_per_s"] / concurrent["steps_per_s"] if cold else None,
        # CPU per step (host and sandboxes): the comparison that holds on a machine others are loading
        "cpu_ms_per_step": concurrent["cpu_s"] / concurrent["steps"] * 1e3,
        "cpu_ms_per_step_worker": cold["cpu_s"] / cold["steps"] * 1e3 if cold else None,
        # containment's cost: the same episodes and worker scheme in a PID namespace alone (None: not contained)
        "sandbox_overhead": bare["steps_per_s"] / concurrent["steps_per_s"] if bare else None,
        "env_steps_per_s_uncontained": bare["steps_per_s"] if bare else None,
        "target_sandbox_overhead": TARGET_OVERHEAD,
        "grading_s_per_submission": statistics.median(by_tool["submit"]),
        "target_steps_per_s": TARGET_STEPS_PER_S,
        "meets_target": concurrent["steps_per_s"] >= TARGET_STEPS_PER_S,
        "rewards_ok": ok,
        "tool_ms_p50": {t: statistics.median(v) * 1e3 for t, v in sorted(by_tool.items())},
        "time_share_pytest": sum(sum(by_tool[t]) for t in ("run_tests", "submit")) / total,
        "pytest_runs_per_step": pytest_runs / sum(len(v) for v in by_tool.values()),
        "pytest_breakdown_ms": _pytest_breakdown(records[0]),
        "concurrent": {k: v for k, v in concurrent.items() if k != "timings"},
        "sequential": {k: v for k, v in sequential.items() if k != "timings"},
        "worker": {k: v for k, v in cold.items() if k != "timings"} if cold else None,
        "uncontained": {k: v for k, v in bare.items() if k != "timings"} if bare else None,
        "tasks": n_tasks,
        "isolation": sandbox.isolation()["mode"],
        "forked_runs": sandbox.forked_runs(),
        **start,
        "seed": seed,
    }


def measure_container(record: dict, episodes: int = 6, workers: int = 3) -> dict:
    """The same scripted episodes on a real instance in containers (composer.env.real.container): each one's container
    start (reset: the image's /testbed copied out, the episode's container up), run_tests and grading seconds, and
    episodes per second one at a time and `workers` at once. Then what grading's layers cost: the instance's probes
    computed once (container.held_out, into a composer cache of this run's own, so computed now), and the gold patch
    graded with every layer and without each one (container.SWITCHABLE), interleaved, two rounds."""
    from composer.env.real import container

    def play(gold: bool) -> dict:
        env = CodingEnv()
        try:
            start = time.perf_counter()
            env.reset(instance=record)
            times = {"start_s": time.perf_counter() - start}
            fix = gold_edits(record) if gold else [{"path": gold_edits(record)[0]["path"], "start": 1, "end": 0,
                                                     "new_text": "# looked here\n"}]
            for e in fix:
                env.call("edit", **e)
            start = time.perf_counter()
            env.call("run_tests")
            times["run_tests_s"] = time.perf_counter() - start
            start = time.perf_counter()
            times["reward"] = env.call("submit").reward
            times["grading_s"] = time.perf_counter() - start
            return {**times, "gold": gold}
        finally:
            env.close()

    def grading_s(off: tuple[str, ...]) -> float:
        gold = {"instance_id": record["instance_id"], "model_name_or_path": "gold", "model_patch": record["patch"]}
        start = time.perf_counter()
        graded = container.grade(gold, record, timeout_s=600, off=off)
        assert graded["resolved"] and graded["probes"]["missed"] == 0, graded
        return time.perf_counter() - start

    begin = machine()
    without = {name: (name,) for name in container.SWITCHABLE}
    with tempfile.TemporaryDirectory(prefix="composer-bench-cache-") as cache, \
            mock.patch.dict(os.environ, {"COMPOSER_CACHE": cache}):
        start = time.perf_counter()
        held = container.held_out(record)
        probes_once_s = time.perf_counter() - start
        timed = {name: [] for name in ["all", *without]}
        for _ in range(2):  # interleaved: the machine's drift hits every variant alike
            timed["all"].append(grading_s(()))
            for name, off in without.items():
                timed[name].append(grading_s(off))
        runs = {}
        for n in (1, workers):
            start = time.perf_counter()
            with ThreadPoolExecutor(n) as pool:
                done = list(pool.map(play, [i % 2 == 0 for i in range(episodes)]))
            runs[n] = {"at_once": n, "wall_s": time.perf_counter() - start, "episodes": done}
    every = [e for run in runs.values() for e in run["episodes"]]
    per_s = {n: episodes / run["wall_s"] for n, run in runs.items()}
    return {
        "backend": "container", "engine": Path(container.engine()).name, "image": container.image(record),
        "instance_id": record["instance_id"],
        **{f"{k}_p50": statistics.median(e[k] for e in every) for k in ("start_s", "run_tests_s", "grading_s")},
        "episodes_per_s": {str(n): v for n, v in per_s.items()},
        "speedup_at_once": per_s[workers] / per_s[1],
        # once per image and instance: candidates run on the base and twice on the gold patch, each side in a
        # fresh container of its own (the eval script's setup included)
        "probes": len(held.probes), "probes_candidates": held.candidates, "probes_once_s": probes_once_s,
        "grading_with_plain_values_s": timed["all"],  # every layer on
        # what each layer adds to a grading: medians over the rounds of (every layer) - (all but that one)
        **{f"grading_without_{name}_s": timed[name] for name in without},
        **{f"grading_{name}_added_s": statistics.median(a - b for a, b in zip(timed["all"], timed[name]))
           for name in without},
        "rewards_ok": all(e["reward"] == (1.0 if e["gold"] else 0.0) for e in every),
        "runs": {str(n): run for n, run in runs.items()},
        **begin,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer bench env", description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=6, help="embedded tasks generated (default 6)")
    parser.add_argument("--episodes", type=int, help="episodes timed with --workers at once (default 24; container 6)")
    parser.add_argument("--workers", type=int, default=2, help="episodes at once (default 2, one per core here)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-worker", action="store_true",
                        help="skip timing the same episodes with a per-episode PytestWorker (warm_tests=True)")
    parser.add_argument("--backend", choices=("embedded", "container"), default="embedded",
                        help="container: episodes on a real SWE-bench instance in containers (--instance)")
    parser.add_argument("--instance", default=str(ROOT / "data/swebench-lite/marshmallow-code__marshmallow-1343.json"),
                        help="the real record for --backend container (default: the one shipped)")
    args = parser.parse_args(argv)
    if args.backend == "container":
        from composer.env.real import swebench
        (record,) = swebench.load_instances(args.instance)
        result = measure_container(record, args.episodes or 6, args.workers)
        print(f"container episodes on {record['instance_id']} ({result['engine']}): start "
              f"{result['start_s_p50']:.2f} s, run_tests {result['run_tests_s_p50']:.2f} s, grading "
              f"{result['grading_s_p50']:.2f} s (medians; a grading's probes add "
              f"{result['grading_probes_added_s']:+.2f} s, plain values "
              f"{result['grading_plain_values_added_s']:+.2f} s, "
              f"the read-only copy {result['grading_read_only_added_s']:+.2f} s; {result['probes']} probes computed "
              f"once in {result['probes_once_s']:.1f} s); episodes/s " + ", ".join(
                  f"{n} at once {v:.3f}" for n, v in result["episodes_per_s"].items()))
        print(json.dumps(result))
        return 0 if result["rewards_ok"] else 1
    result = measure(args.tasks, args.episodes or 24, args.workers, args.seed, compare_worker=not args.no_worker)
    c, b = result["concurrent"], result["pytest_breakdown_ms"]
    print(f"env_steps_per_s   {result['env_steps_per_s']:6.1f}  ({c['steps']} steps, {c['episodes']} episodes, "
          f"{c['workers']} at once; target >= {TARGET_STEPS_PER_S})")
    print(f"  one at a time   {result['env_steps_per_s_sequential']:6.1f}")
    if result["env_steps_per_s_worker"]:
        print(f"  with a worker   {result['env_steps_per_s_worker']:6.1f}  (same episodes, interleaved; "
              f"{result['worker_speedup']:.2f}x the default)")
        print(f"  CPU per step    {result['cpu_ms_per_step']:6.0f} ms default, {result['cpu_ms_per_step_worker']:.0f} ms "
              "with a worker")
    if result["sandbox_overhead"]:
        print(f"  containment     {result['sandbox_overhead']:.2f}x step time vs a PID namespace alone "
              f"({result['env_steps_per_s_uncontained']:.1f} steps/s; target <= {TARGET_OVERHEAD}); grading "
              f"{result['grading_s_per_submission']:.2f} s per submission")
    print("  tool p50 ms     " + ", ".join(f"{t} {ms:.0f}" for t, ms in result["tool_ms_p50"].items()))
    print(f"  pytest runs     {result['pytest_runs_per_step']:.2f} per step, {result['time_share_pytest']:.0%} of "
          f"step time; one run: interpreter start {b['python_start']:.0f} ms, +import pytest "
          f"{b['import_pytest']:.0f} ms, whole run {b['run_pytest']:.0f} ms; warm worker: start + first run "
          f"{b['worker_start_and_run']:.0f} ms, later runs {b['worker_run']:.0f} ms")
    if not result["rewards_ok"]:
        print("error: a gold episode was not rewarded 1.0 or a wrong one not 0.0")
    print(json.dumps(result))
    return 0 if result["rewards_ok"] else 1
