#!/usr/bin/env bash
# The prepared device check (composer/bench/gpu.py): on one GPU with no network, in under 10 minutes, the trainer
# benchmark on CUDA at ~85M parameters and at Qwen3-1.7B's architecture (random weights, bf16, a live-like shape),
# and, if vLLM is installed, one vLLM colocate GRPO step with the coding environment; one JSON line of figures last.
# --size 85m|1.7b: those trainer sizes only. --reduced: each size's path on the tiny model on CPU (what the test
# suite runs).
#   scripts/gpu-check.sh [--size 85m 1.7b] [--reduced]
# On a CUDA image whose python3 has torch but not the project (how it ran on an H200, docs/results.md):
#   PYTHON=python3 PYTHONPATH=<the pinned transformers, trl, datasets, dill, multiprocess>:$PWD scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
exec "${PYTHON:-.venv/bin/python}" -m composer bench gpu "$@"
