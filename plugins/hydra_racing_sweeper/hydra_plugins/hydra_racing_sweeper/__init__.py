"""racing: a Hydra sweeper on Optuna that races replicates and prunes (hydra-racing-sweeper).

Select it with `hydra/sweeper=racing`. Hydra discovers it because `hydra_plugins` is a namespace
package: there is no hydra_plugins/__init__.py, on purpose.
"""

__version__ = "0.1.0"
