"""composer.env.containment.limits: the headroom a non-root run's RLIMIT_NPROC gets.

    .venv/bin/pytest -q tests/test_env_limits.py
"""

import os
import threading
from pathlib import Path

from composer.env.containment import limits


def test_the_nproc_headroom_counts_threads_as_rlimit_nproc_does():
    """RLIMIT_NPROC caps a real uid's threads, not its processes: counted as processes, a test worker with torch's
    threads left a non-root run's pytest no room to fork ("unshare: fork failed")."""
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait) for _ in range(16)]
    for t in threads:
        t.start()
    try:
        processes = sum(1 for p in Path("/proc").glob("[0-9]*") if p.stat().st_uid == os.getuid())
        assert limits.own_task_count() - processes >= 12  # this process alone holds 16 more (others start and end)
    finally:
        stop.set()
        for t in threads:
            t.join()
