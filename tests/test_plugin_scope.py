"""A plugin changes nothing for apps that did not ask for it: installing qknorm leaves Hydra's own
`hydra/sweeper=basic` to every other Hydra app, while qknorm's own `-m` gets its de-duplicating
`qknorm_basic` (conf/multirun/dedup.yaml) and its presets their Optuna sweeper."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.helpers import REPO

APP = '''import hydra
@hydra.main(version_base=None, config_path=None)
def main(cfg): print("ran", cfg.x)
main()
'''


def test_a_foreign_hydra_app_keeps_hydras_own_basic_sweeper(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    r = subprocess.run([sys.executable, "app.py", "-m", "+x=1,2", "hydra.sweep.dir=out",
                        "hydra/job_logging=disabled"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("ran ") == 2
    hydra_cfg = yaml.safe_load((tmp_path / "out" / "multirun.yaml").read_text())["hydra"]
    assert hydra_cfg["sweeper"]["_target_"] == ("hydra._internal.core_plugins.basic_sweeper."
                                                "BasicSweeper")
    # ... with qknorm's sweepers installed and found by that same interpreter, outside the repo
    found = subprocess.run([sys.executable, "-c", "from hydra.core.plugins import Plugins; "
                            "from hydra.plugins.sweeper import Sweeper; print(sorted(p.__name__ "
                            "for p in Plugins.instance().discover(Sweeper)))"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "DedupBasicSweeper" in found.stdout, found.stderr


def sweeper_target(*overrides: str) -> str:
    r = subprocess.run([sys.executable, "-m", "qknorm.train", *overrides, "--cfg", "hydra"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return yaml.safe_load(r.stdout)["hydra"]["sweeper"]["_target_"]


@pytest.mark.slow
def test_qknorm_multiruns_dedup_and_presets_take_their_own_sweeper():
    assert sweeper_target() == "hydra_plugins.qknorm_sweeper.basic.DedupBasicSweeper"
    optuna = "hydra_plugins.hydra_racing_sweeper.racing_sweeper.RacingSweeper"
    assert sweeper_target("search=p_grid") == optuna
    assert sweeper_target("experiment=paper_cpu") == optuna
    # Hydra's own, on request
    assert sweeper_target("hydra/sweeper=basic") == ("hydra._internal.core_plugins."
                                                     "basic_sweeper.BasicSweeper")
