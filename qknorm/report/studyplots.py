"""Optuna's own plots of a study (history, parameter importances, slices), drawn through pyplot:
callers close them (plots.close) once rendered.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
from matplotlib.figure import Figure


def optuna_figures(study) -> tuple[dict[str, Figure], list[str]]:
    """History, param importances and slice plots of a study; notes for those it cannot draw."""
    import optuna
    from optuna.visualization import matplotlib as ovm

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    kw = {}
    if len(study.directions) > 1:  # multi-objective: plot the first objective
        kw = {"target": lambda t: t.values[0], "target_name": "objective 0"}
    done = [t for t in study.get_trials(deepcopy=False)
            if t.state == optuna.trial.TrialState.COMPLETE]
    figures, notes = {}, []
    # PED-ANOVA, Optuna 5's default, named so that Optuna 4.9 (whose default, fANOVA, needs
    # scikit-learn) draws the same importances.
    importances = functools.partial(ovm.plot_param_importances,
                                    evaluator=optuna.importance.PedAnovaImportanceEvaluator())
    plotters = {"history": ovm.plot_optimization_history, "importances": importances,
                "slice": ovm.plot_slice}
    for name, plot in plotters.items():
        if name == "importances" and len(done) < 2:
            notes.append(f"study {study.study_name!r}: no importances plot ({len(done)} completed "
                         "trial(s); it needs at least 2)")
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # optuna marks these plots experimental
                axes = plot(study, **kw)
        except Exception as e:  # e.g. one distinct param value: importances are undefined
            notes.append(f"study {study.study_name!r}: no {name} plot ({type(e).__name__}: {e})")
            continue
        ax = np.ravel(axes)[0]
        figures[name] = ax.figure
    return figures, notes
