"""003's offline teacher queries, the same work twice: the local server its own way (each step's prompt encoded once
for its k samples, the KV cache written into reserved room), and HF generate's plain way (the prompt encoded k times,
the cache concatenated at every token), which is how the server generated before either.

    python -m composer bench teachers [--profile report] [--traces 20] [--k 8] [--max-tokens 256]

    from composer.bench.teachers import measure
    result = measure(profile="smoke", traces=1, k=2, max_tokens=8)   # the dict printed as the last stdout line

The work is 003's at report scale on fewer traces: every step of the first `traces` traces of 002a's output
(runs/002a-trace-collection-trl/traces.jsonl; where it is missing, 8 episodes of the scripted expert with detours,
as 003 does, and the JSON says which), the zoo profile's three teachers served by composer.serve in this process,
k samples per step and teacher in one seeded request, one torch thread (003's setting). Nothing is cached: each
variant replays into a fresh folder. A warm-up request goes first, so neither pays the first-call costs. The
seeds are the same, but the server's shared-prompt attention adds in another order than SDPA, so a sample whose
sampled token was a near tie can take another path: `differing_samples` counts the samples whose text differs
(`same_answers` when none), and both variants' completion tokens are reported. Speedup is the plain wall time over
the server's.
"""

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from composer.bench import machine
from composer.paths import ROOT

TRACES = ROOT / "runs/002a-trace-collection-trl/traces.jsonl"


async def _queries(by_trace, teachers: dict, k: int, max_tokens: int, seed: int, plain: bool) -> tuple[float, list]:
    from composer import replay
    from composer.serve import serve
    from composer.teachers import TeacherSpec

    with serve(models=teachers, seed=seed, plain=plain) as server, \
            tempfile.TemporaryDirectory(prefix="composer-bench-teachers-") as tmp:
        specs = [TeacherSpec(name=name, model=name, kind="policy", base_url=server.base_url, k=k, temperature=1.0,
                             max_tokens=max_tokens, action_space="tools", timeout_s=120.0, max_retries=1)
                 for name in teachers]
        first = next(iter(by_trace))
        warm = [spec.model_copy(update={"k": 1, "max_tokens": 4}) for spec in specs]
        await replay.replay({first: by_trace[first][:1]}, warm, Path(tmp) / "warm", concurrency=4, seed=seed + 1)
        start = time.perf_counter()
        result = await replay.replay(by_trace, specs, Path(tmp) / "queries", concurrency=4, seed=seed)
        return time.perf_counter() - start, result.records


def measure(profile: str = "report", traces: int = 20, k: int = 8, max_tokens: int = 256, seed: int = 0) -> dict:
    import torch

    from composer import zoo
    from composer.disagreement import reference_pairs
    from composer.traces import group_traces, load_traces

    start = machine()
    torch.set_num_threads(1)
    records = load_traces(TRACES) if TRACES.is_file() else reference_pairs.embedded_traces(8, seed=seed)
    by_trace = dict(list(group_traces(records, on_error="collect").items())[:traces])
    teachers = {name: path for name, path in zoo.zoo(profile).items() if name != "student"}
    wall, answers = {}, {}
    for plain in (True, False):
        wall[plain], answers[plain] = asyncio.run(_queries(by_trace, teachers, k, max_tokens, seed, plain))
    first = [q for q in answers[False] if q.sample == 0 and q.prompt_tokens]
    differing = sum(a.raw_text != b.raw_text for a, b in zip(answers[False], answers[True], strict=True))
    return {
        "speedup": wall[True] / wall[False],
        "wall_s_server": wall[False], "wall_s_plain": wall[True],
        "same_answers": differing == 0, "differing_samples": differing,
        "samples": len(answers[False]), "steps": sum(map(len, by_trace.values())), "traces": len(by_trace),
        "mean_prompt_tokens": sum(q.prompt_tokens for q in first) / max(len(first), 1),
        "completion_tokens": sum(q.completion_tokens or 0 for q in answers[False]),
        "completion_tokens_plain": sum(q.completion_tokens or 0 for q in answers[True]),
        "traces_source": str(TRACES.relative_to(ROOT)) if TRACES.is_file() else "embedded fallback (8 episodes)",
        "profile": profile, "teachers": list(teachers), "k": k, "max_tokens": max_tokens,
        "scope": "003's policy teachers (replay) against composer.serve in this process, one torch thread, no cache",
        **start, "seed": seed,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer bench teachers", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="report", help="zoo profile of the teachers (default report)")
    parser.add_argument("--traces", type=int, default=20, help="traces, every step queried (default 20)")
    parser.add_argument("--k", type=int, default=8, help="samples per step and teacher (default 8)")
    parser.add_argument("--max-tokens", type=int, default=256, help="completion budget per sample (default 256)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = measure(args.profile, args.traces, args.k, args.max_tokens, args.seed)
    print(f"003's teacher queries: {result['steps']} steps x {len(result['teachers'])} teachers x k={args.k} "
          f"({result['traces_source']}; mean prompt {result['mean_prompt_tokens']:.0f} tokens)")
    print(f"  the server's way {result['wall_s_server']:.1f} s, HF generate's plain way {result['wall_s_plain']:.1f} s: "
          f"x{result['speedup']:.2f}; same answers: {result['same_answers']} "
          f"({result['differing_samples']} of {result['samples']} samples differ)")
    print(f"load average at start {result['load_average_1m_at_start']:.2f} on {result['cpus']} CPUs")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
