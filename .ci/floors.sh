#!/usr/bin/env bash
# CI, second job: the oldest versions pyproject.toml allows must work too. A separate venv gets
# every direct dependency of qknorm and of the racing sweeper (plugins/hydra_racing_sweeper) at
# its floor (.ci/floors.py) and, for torch, the local CPU build; then
# the lint and a few seconds-long tests that between them call each dependency.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-floors
# The torch build on this machine's disk (the Makefile's TORCH_SPEC): an older torch from the
# package index is a multi-GB CUDA build. pyproject.toml justifies torch's floor instead.
TORCH_VERSION=2.13.0
TESTS=(
    tests/test_norms.py                      # torch: the norms and their autograd Functions
    tests/test_nn.py                         # qknorm.nn imports torch alone
    tests/test_nn_hosts.py                   # transformers: the Qwen3 host
    tests/test_model.py::test_causality      # the GPT with every norm: nn.RMSNorm, SDPA
    tests/test_config.py                     # hydra-core, omegaconf
    tests/test_results.py                    # pandas, scipy, pyyaml
    tests/test_results_cli.py::test_report_cli_on_a_study_draws_its_optuna_plots  # matplotlib, optuna plots
    # A real sweep: the sweeper (optuna, sqlalchemy, heartbeats) runs one training job (tqdm).
    tests/test_sweeper.py::test_pruner_and_sampler_switched_by_name
    # Optuna's private stale-trial query, which specs.RDBHeartbeatStorage extends.
    tests/test_sweeper.py::test_a_trial_killed_before_its_first_heartbeat_is_failed_and_retried_once_grace_old
    # Optuna 4.9's TPE proposes a committed (5.0) search's points again: the pinned defaults.
    tests/test_sweeper_seeds.py::test_the_committed_tpe_search_is_proposed_again_point_for_point
)
start=$SECONDS
rm -rf "$VENV"
python3 -m venv "$VENV"
python3 .ci/floors.py --torch "$TORCH_VERSION" > "$VENV/floors.txt"
# Wheels only, so a floor with no wheel for this Python fails here instead of building for
# minutes; antlr4-python3-runtime (hydra-core's pin) is published as source only.
# --no-compile: tests import a fraction of torch, compiled on first import.
"$VENV/bin/pip" install --quiet --no-compile --only-binary :all: \
    --no-binary antlr4-python3-runtime -c "$VENV/floors.txt" -e ./plugins/hydra_racing_sweeper \
    -e ".[sweep,dev]"
echo "floors: installed $(tr '\n' ' ' < "$VENV/floors.txt")in $((SECONDS - start)) s"
"$VENV/bin/ruff" check qknorm scripts tests hydra_plugins plugins
# Old releases' deprecation warnings about their own dependencies are noise here.
# Two workers, as make test: the tests are independent and CI has two cores.
"$VENV/bin/python" -m pytest -p no:cacheprovider -q -n 2 -W ignore::DeprecationWarning \
    "${TESTS[@]}"
echo "floors: done in $((SECONDS - start)) s"
