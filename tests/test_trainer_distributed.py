"""ComposerTrainer under a 2-process CPU launch: finite loss, identical parameters on every rank."""

import json
import math
import socket
import subprocess
import sys
from pathlib import Path


def test_two_process_step_keeps_ranks_identical(tmp_path):
    out = tmp_path / "result.json"
    script = Path(__file__).with_name("distributed_step.py")
    with socket.socket() as s:  # torchrun's --master-port 0 hangs on this torch; take a free port instead
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(port),
           str(script), str(out)]
    # the timeout only guards against a hang: a loaded machine (a report run beside it) took over 240 s
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={"HF_HUB_OFFLINE": "1",
                          "PATH": "/usr/bin:/bin", "COMPOSER_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    assert math.isfinite(result["loss"])
    assert result["max_rank_diff"] == 0.0
    assert result["moved"] > 0  # the step did update the weights
