"""composer.bench.serve at a tiny size through the CLI: the JSON last line, its keys and its arithmetic.

    .venv/bin/pytest tests/test_bench_serve.py

Throughput is not asserted against the 200 requests/s target (a benchmark, not a timed test on a shared
machine): only that every figure is measured, positive, and derived from the raw ones.
"""

import json
import math
import os
import subprocess
import sys

from composer.paths import ROOT

SIZE = ["--requests", "40", "--concurrency", "8", "--gen-requests", "4", "--gen-concurrency", "2",
        "--max-tokens", "8", "--sequential", "2", "--k", "3", "--k-prompt-tokens", "300", "--k-repeats", "1"]


def _positive_finite(x):
    return isinstance(x, float) and math.isfinite(x) and x > 0


def test_cli_prints_the_result_as_its_last_line():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "composer", "bench", "serve", *SIZE], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)  # a hang guard
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    table = lines[:-1]  # the human-readable table comes first
    assert table[0].startswith("requests_per_s") and any(line.startswith("tokens_per_s") for line in table)

    for key in ("requests_per_s", "server_requests_per_cpu_s", "tokens_per_s", "tokens_per_s_sequential",
                "batching_speedup"):
        assert _positive_finite(result[key]), key
    echo, generate, sequential = result["echo"], result["generate"], result["sequential"]
    assert (echo["requests"], echo["concurrency"]) == (40, 8)
    assert (generate["requests"], generate["concurrency"], generate["max_tokens"]) == (4, 2, 8)
    assert (sequential["requests"], sequential["concurrency"]) == (2, 1)
    assert result["requests_per_s"] == echo["requests"] / echo["wall_s"]
    assert result["tokens_per_s"] == generate["completion_tokens"] / generate["wall_s"]
    assert result["tokens_per_s_sequential"] == sequential["completion_tokens"] / sequential["wall_s"]
    assert result["batching_speedup"] == result["tokens_per_s"] / result["tokens_per_s_sequential"]
    assert result["server_requests_per_cpu_s"] == result["requests_per_s"] / echo["server_cpu_cores"]
    ks = result["k_samples"]
    assert (ks["k"], ks["prompt_tokens"], ks["max_tokens"], ks["repeats"]) == (3, 300, 8, 1)
    assert ks["same_tokens"] and 0 < ks["completion_tokens"] <= 3 * 8 and any(l.startswith("k_samples") for l in table)
    assert result["k_samples_speedup"] == ks["wall_s_plain"] / ks["wall_s_server"] > 0
    assert 0 < generate["completion_tokens"] <= 4 * 8 and echo["completion_tokens"] > 0
    for figures in (echo, generate, sequential):
        assert figures["latency_s_p50"] <= figures["latency_s_p90"] <= figures["latency_s_p99"]
        assert figures["client_cpu_cores"] > 0 and figures["server_cpu_cores"] > 0
    assert result["target_requests_per_s"] == 200 and result["load_average_1m_at_start"] >= 0 and result["cpus"] >= 1
    assert result["meets_target"] is (result["requests_per_s"] >= 200)
