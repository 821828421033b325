#!/usr/bin/env bash
# The paper's own scale (issue 58): experiment=paper, p in {2, 4} x gamma init in {qknorm,
# calibrated}, fold by fold. The four runs of a fold share the GPU at once: one sweeper per gamma
# init (its study is gamma and fold: a study keeps one set of replicates), each launching its two
# p through the gpu launcher. Every fold ends with its four paired runs, so a lease cut short
# keeps whole folds; a later lease adds folds with the next fold numbers.
#   scripts/paper_scale.sh RUNS FOLDS [OVERRIDE ...]   # e.g. scripts/paper_scale.sh /tmp/runs 0,1
# FOLDS comma-separated, run in that order; OVERRIDEs go to every run (a smoke test: model=tiny
# train.max_iters=20 device=cpu).
# Run dirs land in RUNS/<gamma init>/fold<F>/, studies in RUNS/<gamma init>/optuna.db.
# Report: python scripts/report.py RUNS/<gamma init> (the committed ones: docs/results/paper_scale).
set -euo pipefail
runs=$1; folds=$2; shift 2
for fold in ${folds//,/ }; do
  pids=()
  for gamma in qknorm calibrated; do
    mkdir -p "$runs/$gamma"
    python3 -m qknorm.train experiment=paper norm.gamma_init=$gamma \
      'hydra.sweeper.params={norm.p:"choice(2.0,4.0)"}' "hydra.sweeper.replicates={data.fold:[$fold]}" \
      hydra.sweeper.study_name=paper_scale_${gamma}_fold$fold hydra.sweeper.n_jobs=2 \
      hydra.launcher.n_jobs=2 threads=4 "hydra.sweeper.storage=sqlite:///$runs/$gamma/optuna.db" \
      "hydra.sweep.dir=$runs/$gamma/fold$fold" "$@" > "$runs/$gamma/fold$fold.log" 2>&1 &
    pids+=($!)
  done
  status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  tail -n 3 "$runs"/*/fold$fold.log
  [ "$status" = 0 ] || { echo "fold $fold: a sweeper exited $status (its log above)"; exit "$status"; }
done
