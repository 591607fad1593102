"""ComposerTrainer under a 2-process CPU launch: finite loss, identical parameters on every rank."""

import json
import math
import subprocess
import sys
from pathlib import Path

from ports import free_port


def test_two_process_step_keeps_ranks_identical(tmp_path):
    out = tmp_path / "result.json"
    script = Path(__file__).with_name("distributed_step.py")
    port = free_port()  # torchrun's --master-port 0 hangs on this torch; take a free port instead
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(port),
           str(script), str(out)]
    # The timeout only guards against a hang: a loaded machine (a report run beside it) took over 240 s.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={
        "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "COMPOSER_CACHE": str(tmp_path / "cache")})
    try:
        _, stderr = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        # torchrun starts its ranks in sessions of their own: a kill of torchrun alone would leave them running,
        # so it is asked to stop them first (SIGTERM), and killed only if it does not
        proc.terminate()
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    assert proc.returncode == 0, stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    assert math.isfinite(result["loss"])
    assert result["max_rank_diff"] == 0.0
    assert result["moved"] > 0  # the step did update the weights
