#!/usr/bin/env bash
# The prepared device check (composer/bench/gpu.py): on one GPU with no network, in under 10 minutes, the trainer
# benchmark at ~85M parameters on CUDA and, if vLLM is installed, one vLLM colocate GRPO step with the coding
# environment; one JSON line of figures last. --reduced: the tiny model on CPU (what the test suite runs).
#   scripts/gpu-check.sh [--reduced]
# On a CUDA image whose python3 has torch but not the project (how it ran on an H200, docs/results.md):
#   PYTHON=python3 PYTHONPATH=<the pinned transformers, trl, datasets, dill, multiprocess>:$PWD scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
exec "${PYTHON:-.venv/bin/python}" -m composer bench gpu "$@"
