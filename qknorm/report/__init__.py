"""The report wing: run dirs -> DataFrame -> statistics -> summary.md and figures.

  results    run dirs (and studies) -> one DataFrame of runs
  paxis      how p is written and placed (labels, ticks, the inf break): its one home
  baseline   the run p (a grid or a continuous search) and the baseline p they are compared with
  stats      numbers only: intervals, paired tests, fits
  timing     a timing (wall time, tokens/s) by its median and range, never a t-interval
  readings   best and final val loss side by side, and whether they order p alike
  lrsens     the learning-rate reading: LR sensitivity per norm, max stable lr (a sweep over lr)
  arms       a run's logit-control arm (conf/arm/), read from its keys; QKNorm the reference
  plots      figures against p (loss, time, γ, entropy, learned p) and render
  canvas     what every figure shares: canvas, labels, colours, gids, --by series, legend
  stepplots  figures over training steps
  deltaplot  the paired Δ vs the baseline, per p
  lrplots    the loss against lr, the largest attention logit near the top lr, by width and head
  studyplots Optuna's own plots of a study
  computed   Options and Statistics: every number, computed once
  tables     how summary.md writes a p-value, a table (a number: hydra_racing_sweeper.units)
  summary    summary.md's sections
  lrsection  its learning-rate section
  searchsection  its racing search's section: the answer and the minimiser's fit
  build      checks, load, figures, build_report, write_report
  paper      the paper's table beside ours
  archcompare  two architectures on the same folds: arms, paired Δ, interaction

The face: the names in _FACE and the modules in _MODULES (`__all__`); the other modules are the
wing's own. Names load lazily (PEP 562), so `from qknorm.report import results` does not import
matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

_FACE = {
    **dict.fromkeys(["DEFAULT_EQUIVALENCE", "DEFAULT_METRIC", "Options", "Statistics", "compute"],
                    "qknorm.report.computed"),
    "AUTO": "qknorm.report.baseline",  # --baseline's default
    **dict.fromkeys(["markdown_table", "summarize"], "qknorm.report.summary"),
    **dict.fromkeys(["format_p", "p_labels"], "qknorm.report.paxis"),
    **dict.fromkeys(["Report", "build_report", "check_columns", "check_logged", "figures", "load",
                     "parse_p", "write_report"], "qknorm.report.build"),
}
# Modules the rest may import whole (the scripts' commands, qknorm.claims): run dirs to a
# DataFrame, the statistics, the figures, the paper's table, the architecture comparison, the
# learning-rate reading.
_MODULES = ["archcompare", "lrsens", "paper", "plots", "results", "stats", "stepplots"]
__all__ = sorted([*_FACE, *_MODULES])


def __getattr__(name: str) -> Any:
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_FACE[name]), name)
