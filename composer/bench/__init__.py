"""Benchmarks run with `python -m composer bench NAME [ARGS ...]`."""

import os
import platform


def machine() -> dict:
    """What a benchmark runs on, read before it starts, for its JSON: a figure from a loaded machine is
    recognisable by it (the cores this process may use, the 1-minute load average, the processor)."""
    return {"cpus": len(os.sched_getaffinity(0)), "load_average_1m_at_start": os.getloadavg()[0],
            "machine": platform.processor() or platform.machine()}
