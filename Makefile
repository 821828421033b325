# qknorm: `make help` lists the targets. Everything runs inside .venv, created on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch, explicitly: a plain `pip install torch` pulls a multi-GB CUDA build.
# Override for a GPU machine, e.g. `make install TORCH_SPEC=torch TORCH_INDEX=`.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
SWEEP ?= $(shell ls -d outputs/sweeps/*/* 2>/dev/null | sort | tail -n 1)
PYTEST_ARGS ?=

.PHONY: help install test train sweep report bench lint clean

help:  ## list the targets
	@grep -hE '^[a-z][a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

install: $(BIN)/.installed  ## create .venv and install qknorm with the CPU build of torch

test: install  ## run the test suite
	$(BIN)/python -m pytest $(PYTEST_ARGS)

train: install  ## one training run with defaults (pass ARGS="norm.p=4 ...")
	$(BIN)/python -m qknorm.train $(ARGS)

sweep: install  ## the default p sweep, then its report
	$(BIN)/python -m qknorm.train -m norm.p=1,2,3,4,inf name=p_sweep train.max_iters=500 threads=1 hydra/launcher=joblib hydra.launcher.n_jobs=2
	@$(MAKE) --no-print-directory report SWEEP=$$(ls -d outputs/sweeps/p_sweep/* | sort | tail -n 1)

report: install  ## results.csv, summary.md, report/*.png|pdf for SWEEP=DIR (default: newest sweep); prints the table
	@test -n "$(SWEEP)" || { echo "no sweep found under outputs/sweeps; pass SWEEP=DIR" >&2; exit 2; }
	$(BIN)/python scripts/report.py "$(SWEEP)" $(ARGS)

bench: install  ## speed benchmark (JSON to outputs/bench.json)
	$(BIN)/python scripts/bench.py --out outputs/bench.json

lint: install  ## ruff
	$(BIN)/ruff check qknorm scripts tests hydra_plugins

clean:  ## remove outputs (keeps .venv)
	find outputs -mindepth 1 ! -name .gitkeep -exec rm -rf {} +
