# attnbench — every target sets up .venv first (idempotent), then runs.
#   make bench-speed                 # speed suite, quick profile, cuda if available else cpu
#   make bench-speed PROFILE=paper DEVICE=cuda
#   make test                        # installs the test tools (pytest, ruff, Ray) on first use
#   make setup TORCH_INDEX=https://download.pytorch.org/whl/cu126   # a CUDA build of torch (see the README)

PYTHON     ?= python3
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
PROFILE    ?= quick
OUT        ?= results
VENV       := .venv
BIN        := $(VENV)/bin
STAMP      := $(VENV)/.installed
DEV_STAMP  := $(VENV)/.installed-dev
RAY_STAMP  := $(VENV)/.installed-ray
# Default device: cuda if torch sees one, else cpu (evaluated after setup, when the venv exists).
DEVICE     ?= $(shell $(BIN)/python -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')" 2>/dev/null || echo cpu)
THREADS    ?=
EXECUTOR   ?= local
ADDRESS    ?=
# RUN_EXECUTOR and RUN_EXTRA are set per target below (training suites differ from the timing suites).
RUN_EXECUTOR = $(EXECUTOR)
RUN_EXTRA    =
RUN_PROFILE  = $(PROFILE)
RUN         = $(BIN)/attnbench run --profile $(RUN_PROFILE) --device $(DEVICE) --out $(OUT) \
              $(if $(THREADS),--threads $(THREADS)) --executor $(RUN_EXECUTOR) $(if $(ADDRESS),--address $(ADDRESS)) \
              $(RUN_EXTRA)

DATA_DIR   ?=
# Training suites on the CPU run two cells at a time, one core each, through Ray (installed on first use): the
# quick profiles' wall budgets assume it. STUDY_EXECUTOR=local runs one cell at a time.
STUDY_EXECUTOR ?= $(if $(filter cpu,$(DEVICE)),ray,$(EXECUTOR))
accuracy robustness hyperparams ablation incoherence forecasting recall: RUN_EXECUTOR = $(STUDY_EXECUTOR)
accuracy robustness hyperparams ablation incoherence forecasting recall: RUN_EXTRA = \
	$(if $(and $(filter ray,$(STUDY_EXECUTOR)),$(filter cpu,$(DEVICE)),$(if $(ADDRESS),,x)),--cpus-per-task 1) \
	$(if $(DATA_DIR),--data-dir $(DATA_DIR))

.PHONY: setup setup-dev setup-ray bench-speed bench-memory bench-long bench-decode accuracy robustness hyperparams ablation \
	incoherence forecasting recall approximation report gpu-check test test-slow lint catalog clean clean-results FORCE

# What running needs (torch, numpy, pandas, matplotlib, PyYAML, tqdm); the test tools and Ray come with the targets
# that use them (setup-dev, setup-ray), so a user who only benchmarks gets a small .venv.
setup: $(STAMP)
setup-dev: $(DEV_STAMP)
setup-ray: $(RAY_STAMP)

# torch first, from TORCH_SPEC, so the project's `torch>=2.4` requirement is already met when attnbench installs.
# Where from (tools/torch_index.py): TORCH_INDEX if given (e.g. a CUDA index); PyPI (its CUDA build) where an NVIDIA
# GPU is found; a local wheel where pip has one (these machines carry the CPU build); else PyTorch's CPU index, so
# that a fresh machine without a GPU does not pull PyPI's multi-GB CUDA build. A different TORCH_SPEC or TORCH_INDEX
# than the installed one reinstalls.
ifneq ($(strip $(shell cat $(STAMP) 2>/dev/null)),$(strip $(TORCH_SPEC) $(TORCH_INDEX)))
$(STAMP): FORCE
endif
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)" $$($(BIN)/python -m tools.torch_index "$(TORCH_SPEC)" "$(TORCH_INDEX)")
	$(BIN)/python -m pip install -q -e .
	@echo "$(TORCH_SPEC) $(TORCH_INDEX)" > $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[dev]"
	@touch $(DEV_STAMP)

$(RAY_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[ray]"
	@touch $(RAY_STAMP)

# Ray for the targets that run through it (EXECUTOR=ray, or the training suites' default on the CPU).
RAY_SETUP = $(if $(filter ray,$(EXECUTOR)),setup-ray)

bench-speed: setup $(RAY_SETUP)
	$(RUN) suites/speed.yaml

bench-memory: setup $(RAY_SETUP)
	$(RUN) suites/memory.yaml

# Decoding one token at a time against a KV cache, a window or a recurrent state (docs/decode.md)
bench-decode: setup $(RAY_SETUP)
	$(RUN) suites/decode.yaml

# The speed suite's `long` profile (n = 1K…16K), with THREADS, EXECUTOR and ADDRESS as every other target
bench-long: RUN_PROFILE = long
bench-long: setup $(RAY_SETUP)
	$(RUN) suites/speed.yaml

# LRA accuracy (Table 1): offline generators, or the real LRA files with DATA_DIR=/path/to/lra
accuracy: setup $(if $(filter ray,$(STUDY_EXECUTOR)),setup-ray)
	$(RUN) suites/accuracy.yaml

# The S3Attention paper's studies (accuracy suites; DATA_DIR as for `accuracy`):
#   robustness  Table 5: Image-task accuracy under U(-a, a) pixel noise
#   hyperparams Table 6: r, s1, s2 one at a time around (8, 8, 8)
#   ablation    Table 7: each S3Attention component removed
#   incoherence Table S7: μ-incoherence before/after the Fourier convolution
robustness hyperparams ablation incoherence: setup $(if $(filter ray,$(STUDY_EXECUTOR)),setup-ray)
	$(RUN) suites/$@.yaml

# Long-term forecasting (Table 2): generated stand-ins, or the six CSV files with DATA_DIR=/path/to/csvs
forecasting: setup $(if $(filter ray,$(STUDY_EXECUTOR)),setup-ray)
	$(RUN) suites/forecasting.yaml

# Multi-query associative recall against width, decoding state and step time (Zoology's Figure 2; docs/recall.md)
recall: setup $(if $(filter ray,$(STUDY_EXECUTOR)),setup-ray)
	$(RUN) suites/recall.yaml

# Error against exact softmax attention vs. time, per variant budget. Its trained input is the probe of the accuracy
# run of the same PROFILE under OUT (`make accuracy` first); without one those cells are listed as missing.
approximation: setup $(RAY_SETUP)
	$(RUN) suites/approximation.yaml $(if $(wildcard $(OUT)/accuracy/$(PROFILE)/probes),--data-dir $(OUT)/accuracy/$(PROFILE))

report: setup
	$(BIN)/attnbench report $(OUT)

# The whole project on one GPU in a few minutes (tools/gpu_check.py): CUDA tests, every suite's smoke profile on
# cuda, the speed suite's `gpu` profile. PYTHON_RUN=python3 uses a system Python that has torch with CUDA (no .venv).
PYTHON_RUN ?= $(BIN)/python
gpu-check: $(if $(filter $(BIN)/python,$(PYTHON_RUN)),setup-dev)
	$(PYTHON_RUN) -m tools.gpu_check --out $(OUT)/gpu-check

test: setup-dev
	$(BIN)/python -m pytest

test-slow: setup-dev
	$(BIN)/python -m pytest -m slow

lint: setup-dev
	$(BIN)/ruff check attentions harness tests tools

# After adding or changing a variant: the registry's catalogue that `attnbench list` reads without torch
# (harness/catalog.py; a test fails while it is stale).
catalog: setup
	$(BIN)/python -m harness.catalog

# clean: what can be rebuilt or regenerated (the virtualenv, build and test caches, the generated-data cache, the
# libraries' caches a run keeps under OUT/.cache).
# clean-results: the results themselves (every store, table and plot under OUT): nothing can regenerate a store.
clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache $(OUT)/.data_cache $(OUT)/.cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

clean-results:
	find $(OUT) -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
