"""The local server's throughput: HTTP overhead (echo backend) and tiny-model generation under concurrency.

    python -m composer bench serve [--requests 2000] [--concurrency 64] [--gen-requests 64] [--gen-concurrency 16]
                                   [--max-tokens 64] [--sequential 8] [--k 8] [--k-prompt-tokens 3500] [--k-repeats 3]

    from composer.bench.serve import measure
    result = measure(requests=200, concurrency=16)   # the dict printed as the last stdout line

Each server is its own process (`python -m composer.serve`, as a user starts it), so the client's event loop and
the server's do not share an interpreter and its GIL; the client is the openai SDK's AsyncOpenAI with its retries
off, keeping `concurrency` requests in flight until `requests` are done, after an untimed warm-up round.

  requests_per_s   echo backend with the `zero` profile (the simulation path runs: cache lookup, draws, cost,
                   with no latency and no faults), short prompts, non-streaming. Target: >= 200 on 2 cores.
                   Both processes' CPU use is recorded: on 2 cores the SDK client saturates its core first, so
                   server_requests_per_cpu_s is the server's own overhead.
  tokens_per_s     generate backend, the tiny model, temperature 1, max_tokens each: completion tokens (from
                   usage) per wall-clock second. The random model may end early at EOS; the tokens are counted.
                   tokens_per_s_sequential is the same, one request at a time: what batching buys.
  k_samples        003's teacher-query shape: n=k samples of one long prompt (one seeded request), generated in
                   this process by the server's Generator, its own way (the prompt's prefill shared by the k rows,
                   the KV cache written into reserved room) and HF generate's plain way (alternated, `k_repeats`
                   each, medians): k_samples_speedup is the ratio.
"""

import argparse
import asyncio
import contextlib
import json
import resource
import subprocess
import sys
import threading
import time

import numpy as np
import openai
import psutil

from composer import tether
from composer.bench import machine
from composer.models import tiny_model

TARGET_REQUESTS_PER_S = 200
KEY = "sk-local-unused"


@contextlib.contextmanager
def _server(*args: str):
    """A `python -m composer.serve` process; yields its base URL (the last word of its first stdout line) and
    the process, whose CPU time is read around the timed part."""
    proc = subprocess.Popen([sys.executable, "-m", "composer.serve", *args], stdout=subprocess.PIPE, text=True,
                            preexec_fn=tether.tied())  # a killed benchmark leaves no server behind
    try:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the server exited with status {proc.wait()} before serving (see its stderr)")
        yield line.split()[-1], psutil.Process(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _cpu_seconds(server: psutil.Process) -> tuple[float, float]:
    times, usage = server.cpu_times(), resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, times.user + times.system


async def _load(url: str, server: psutil.Process, model: str, requests: int, concurrency: int, **create) -> dict:
    """Send `requests` chat completions, `concurrency` at a time; wall time, latencies, completion tokens, and the
    CPU cores each side kept busy (on 2 cores, the side near 1.0 is the one that bounds the throughput)."""
    client = openai.AsyncOpenAI(base_url=url, api_key=KEY, max_retries=0, timeout=300)
    # Not measured: opening the `concurrency` connections, lazy imports, first-call kernels.
    await asyncio.gather(*(client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": f"warm-up {i}"}], **create) for i in range(concurrency)))
    pending = iter(range(requests))
    latencies, tokens = [], 0

    async def worker():
        nonlocal tokens
        for i in pending:
            start = time.perf_counter()
            r = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": f"Request {i}: run the tests."}], **create)
            latencies.append(time.perf_counter() - start)
            tokens += r.usage.completion_tokens

    client_cpu, server_cpu = _cpu_seconds(server)
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - start
    client_end, server_end = _cpu_seconds(server)
    await client.close()
    return {"requests": requests, "concurrency": concurrency, "wall_s": wall, "completion_tokens": tokens,
            "client_cpu_cores": (client_end - client_cpu) / wall, "server_cpu_cores": (server_end - server_cpu) / wall,
            "latency_s_p50": float(np.percentile(latencies, 50)), "latency_s_p90": float(np.percentile(latencies, 90)),
            "latency_s_p99": float(np.percentile(latencies, 99))}


def _k_samples(path: str, k: int, prompt_tokens: int, max_tokens: int, repeats: int, seed: int) -> dict:
    """Wall time of one seeded n=k request of a `prompt_tokens` prompt, the server's way and HF generate's plain one."""
    from composer.models import load_model
    from composer.generation import Generator, Job

    model = load_model(path).eval()
    prompt = [5 + (i * 7919) % (model.config.vocab_size - 10) for i in range(prompt_tokens)]  # fixed, varied ids
    walls, tokens = {True: [], False: []}, {}
    for r in range(repeats):
        for plain in (False, True) if r % 2 == 0 else (True, False):  # alternated: drift hits both alike
            generator, done, out, ended = Generator({"m": model}, seed, plain=plain), threading.Event(), [], [0]

            def emit(events):
                out.extend(e[1:3] for e in events if e[0] == "token")  # (choice, token id)
                ended[0] += sum(e[0] == "end" for e in events)
                if ended[0] == k:
                    done.set()

            start = time.perf_counter()
            generator.submit(Job(model="m", prompt=prompt, n=k, max_tokens=max_tokens, temperature=1.0, top_p=1.0,
                                 seed=seed, top_logprobs=None, emit=emit))
            done.wait()
            walls[plain].append(time.perf_counter() - start)
            generator.close()
            tokens[plain] = sorted(out)
    server, plain = float(np.median(walls[False])), float(np.median(walls[True]))
    return {"k": k, "prompt_tokens": prompt_tokens, "max_tokens": max_tokens, "repeats": repeats,
            "completion_tokens": len(tokens[False]), "same_tokens": tokens[False] == tokens[True],
            "wall_s_server": server, "wall_s_plain": plain, "k_samples_speedup": plain / server}


def measure(requests: int = 2000, concurrency: int = 64, gen_requests: int = 64, gen_concurrency: int = 16,
            max_tokens: int = 64, sequential: int = 8, seed: int = 0, k: int = 8, k_prompt_tokens: int = 3500,
            k_repeats: int = 3) -> dict:
    path = str(tiny_model())
    start = machine()  # other work on the machine takes cores from both processes
    k_samples = _k_samples(path, k, k_prompt_tokens, max_tokens, k_repeats, seed)
    echo_args = ("--profile", "bench=zero", "--no-generate")
    with _server("--model", f"bench={path}", *echo_args, "--seed", str(seed)) as (url, proc):
        echo = asyncio.run(_load(url, proc, "bench", requests, concurrency, max_tokens=16))
    with _server("--model", f"bench={path}", "--seed", str(seed)) as (url, proc):
        generate = asyncio.run(_load(url, proc, "bench", gen_requests, gen_concurrency, max_tokens=max_tokens,
                                     temperature=1.0))
        one_at_a_time = asyncio.run(_load(url, proc, "bench", sequential, 1, max_tokens=max_tokens, temperature=1.0))
    requests_per_s = echo["requests"] / echo["wall_s"]
    tokens_per_s = generate["completion_tokens"] / generate["wall_s"]
    sequential_tokens_per_s = one_at_a_time["completion_tokens"] / one_at_a_time["wall_s"]
    return {
        "requests_per_s": requests_per_s,
        # The server's own cost, whichever side bounds requests_per_s (on 2 cores it is the client's SDK).
        "server_requests_per_cpu_s": requests_per_s / echo["server_cpu_cores"],
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_sequential": sequential_tokens_per_s,
        "batching_speedup": tokens_per_s / sequential_tokens_per_s,
        "k_samples_speedup": k_samples["k_samples_speedup"],
        "target_requests_per_s": TARGET_REQUESTS_PER_S,
        "meets_target": requests_per_s >= TARGET_REQUESTS_PER_S,
        "echo": echo,
        "generate": {**generate, "max_tokens": max_tokens},
        "sequential": {**one_at_a_time, "max_tokens": max_tokens},
        "k_samples": k_samples,
        "model": "composer.models.tiny_model() (random Qwen3 architecture, 2 layers, hidden 64)",
        "scope": "client and server in separate processes on one machine; openai AsyncOpenAI client, non-streaming",
        **start,
        "seed": seed,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer bench serve", description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="echo requests timed (default 2000)")
    parser.add_argument("--concurrency", type=int, default=64, help="echo requests in flight (default 64)")
    parser.add_argument("--gen-requests", type=int, default=64, help="generation requests timed (default 64)")
    parser.add_argument("--gen-concurrency", type=int, default=16, help="generation requests in flight (default 16)")
    parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens per generation request (default 64)")
    parser.add_argument("--sequential", type=int, default=8, help="generation requests one at a time (default 8)")
    parser.add_argument("--k", type=int, default=8, help="samples of one prompt, k_samples (default 8)")
    parser.add_argument("--k-prompt-tokens", type=int, default=3500,
                        help="that prompt's length in tokens (default 3500, 003's states' mean)")
    parser.add_argument("--k-repeats", type=int, default=3, help="k_samples requests per variant (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = measure(args.requests, args.concurrency, args.gen_requests, args.gen_concurrency, args.max_tokens,
                     args.sequential, args.seed, args.k, args.k_prompt_tokens, args.k_repeats)
    echo, gen = result["echo"], result["generate"]
    print(f"requests_per_s   {result['requests_per_s']:8.1f}  (echo, {echo['requests']} requests, "
          f"{echo['concurrency']} in flight, p50 {echo['latency_s_p50'] * 1e3:.1f} ms, "
          f"p99 {echo['latency_s_p99'] * 1e3:.1f} ms; target >= {TARGET_REQUESTS_PER_S})")
    print(f"  CPU cores busy client {echo['client_cpu_cores']:.2f}, server {echo['server_cpu_cores']:.2f}: "
          f"{result['server_requests_per_cpu_s']:.0f} requests per server CPU second")
    print(f"tokens_per_s     {result['tokens_per_s']:8.1f}  (tiny model, {gen['requests']} requests, "
          f"{gen['concurrency']} in flight, max_tokens {gen['max_tokens']})")
    print(f"  one at a time  {result['tokens_per_s_sequential']:8.1f}  (batching x{result['batching_speedup']:.1f})")
    ks = result["k_samples"]
    print(f"k_samples        n={ks['k']} of one {ks['prompt_tokens']}-token prompt: {ks['wall_s_server']:.2f} s the "
          f"server's way, {ks['wall_s_plain']:.2f} s HF generate's plain way (x{ks['k_samples_speedup']:.1f})")
    print(f"load average at start {result['load_average_1m_at_start']:.2f} on {result['cpus']} CPUs")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
