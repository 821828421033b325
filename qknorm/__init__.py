"""qknorm: Hydra + Optuna sweeps for Lp query-key normalization in small GPTs."""

__version__ = "0.1.0"
