#!/usr/bin/env bash
# The prepared device check (composer/bench/gpu.py): on one GPU with no network, in under 10 minutes, the trainer
# benchmark at ~85M parameters on CUDA and, if vLLM is installed, one vLLM colocate GRPO step with the coding
# environment; one JSON line of figures last. --reduced: the tiny model on CPU (what the test suite runs).
#   scripts/gpu-check.sh [--reduced]
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
exec "${PYTHON:-.venv/bin/python}" -m composer bench gpu "$@"
