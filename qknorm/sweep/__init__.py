"""qknorm's side of the racing sweeper. The sweeper itself is its own distribution,
hydra-racing-sweeper (plugins/hydra_racing_sweeper/: `hydra_racing_sweeper`, no torch, no
qknorm); qknorm is its first client and reaches it through its face (`hydra_racing_sweeper`'s
`__all__`) only. What only qknorm knows reaches the sweeper through its task hook:

  hook    QknormTask (hydra.sweeper.task_hook of qknorm_optuna): qknorm.train's typed config
          checks, its memory check, its effective config (the keys a norm kind reads), its
          run length, and the plan line's time from a step measured here
  trial   the job-side API under its old name: `from qknorm.sweep import trial` is
          hydra_racing_sweeper.trial itself (one module, one registry of reporters)
"""

import sys

from hydra_racing_sweeper import trial

sys.modules[__name__ + ".trial"] = trial  # `import qknorm.sweep.trial` finds the same module
__all__ = ["hook", "trial"]
