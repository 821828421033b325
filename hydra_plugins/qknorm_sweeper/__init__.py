"""qknorm_optuna: a Hydra sweeper on Optuna >= 4 with pruning, replicates, resume and workers.

Select it with `hydra/sweeper=qknorm_optuna` (the search/ presets do). Hydra discovers it because
`hydra_plugins` is a namespace package: there is no hydra_plugins/__init__.py, on purpose.
"""
