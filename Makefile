# qknorm: `make help` lists the targets. Everything runs inside .venv, created on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch, explicitly: a plain `pip install torch` pulls a multi-GB CUDA build.
# Override for a GPU machine, e.g. `make install TORCH_SPEC=torch TORCH_INDEX=`. An index that
# does not answer within 3 s is skipped (scripts/install_torch.py), not retried for minutes.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# The newest sweep by modification time (a resumed sweep writes into its old folder), not by
# name: names sort by preset before time (p_grid's folders before p_tpe's).
SWEEP ?= $(shell ls -dt outputs/sweeps/*/* 2>/dev/null | head -n 1)
PYTEST_ARGS ?=
# Tests in parallel (pytest-xdist): most run 1-thread training jobs, so 2 workers use both cores.
# --dist loadgroup keeps the tests of one cluster service on one worker (tests/test_cluster.py).
PYTEST_WORKERS ?= 2

.PHONY: help install test claims train sweep report bench lint clean

help:  ## list the targets
	@grep -hE '^[a-z][a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml plugins/hydra_racing_sweeper/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/python scripts/install_torch.py "$(TORCH_SPEC)" --index "$(TORCH_INDEX)"
	$(BIN)/pip install --quiet -e plugins/hydra_racing_sweeper  # the sweeper, qknorm's dependency (not on PyPI)
	$(BIN)/pip install --quiet -e ".[sweep,dev,postgres,slurm,tracking,dashboard,kjv,bpe,replay]"  # the sweeps, the tests, the cluster, tracker, dashboard, corpus and replay tests' extras
	touch $@

install: $(BIN)/.installed  ## create .venv and install qknorm with the CPU build of torch

test: install  ## run the test suite
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

claims: install  ## recompute every results-page number from the committed runs (qknorm.claims)
	$(BIN)/python -m qknorm.claims check

train: install  ## one training run with defaults (pass ARGS="norm.p=4 ...")
	$(BIN)/python -m qknorm.train $(ARGS)

# A fresh study per run (named after its sweep dir's time stamp); `search=p_grid` alone resumes.
sweep: install  ## the default p sweep (8-point grid over p incl. inf, 2 jobs in parallel), then its report
	$(BIN)/python -m qknorm.train search=p_grid hydra/launcher=parallel train.max_iters=500 \
		'hydra.sweeper.study_name=p_grid_$${now:%Y-%m-%d_%H-%M-%S}'
	@$(MAKE) --no-print-directory report SWEEP=$$(ls -dt outputs/sweeps/p_grid/* | head -n 1)

report: install  ## results.csv, summary.md and figures for SWEEP=DIR (default: the newest sweep)
	@test -n "$(SWEEP)" || { echo "error: no sweep found under outputs/sweeps; pass SWEEP=DIR" >&2; exit 2; }
	$(BIN)/python scripts/report.py "$(SWEEP)" $(ARGS)

bench: install  ## speed benchmark (JSON to outputs/bench.json)
	$(BIN)/python scripts/bench.py --out outputs/bench.json

lint: install  ## ruff
	$(BIN)/ruff check qknorm scripts tests hydra_plugins plugins

clean:  ## remove outputs (keeps .venv)
	find outputs -mindepth 1 ! -name .gitkeep -exec rm -rf {} +
