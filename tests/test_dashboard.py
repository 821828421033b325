"""optuna-dashboard reads our studies: its server, started as users start it
(`optuna-dashboard sqlite:///outputs/optuna.db`, README "Watching a sweep"), on a free local
port, lists a race and a racing search that our sweeper made on tests/helpers/race_task.py's table, and
its JSON API gives each trial's state, value and the verdict in user attr `race`.

The routes are optuna-dashboard's own (optuna_dashboard/_app.py): GET /api/studies lists the
studies ({"study_summaries": [{"study_id", "study_name", ...}]}); GET /api/studies/<id> gives one
with its trials ({"trials": [{"number", "state", "values", "user_attrs": [{"key", "value"}]}]}),
a user attr's value as a string (a dict as its JSON).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
from hydra_racing_sweeper import readback

from tests.helpers.cli import run_cli
from tests.helpers.race import RACE, SEARCH, TASK, check_table

pytest.importorskip("optuna_dashboard", reason="optuna-dashboard is the `dashboard` extra")

# The search gets its own sweep dir: its trial dirs must not be the race's.
SEARCH_HERE = [*SEARCH, "hydra.sweep.dir=search"]


def free_port() -> int:
    """A port nothing listens on now (the OS picks it; the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def serve(storage: str, cwd: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """`optuna-dashboard STORAGE` on 127.0.0.1, once it answers (within 60 s)."""
    port = free_port()
    command = Path(sys.executable).with_name("optuna-dashboard")
    with open(log, "w") as out:
        proc = subprocess.Popen([str(command), storage, "--host", "127.0.0.1", "--port",
                                 str(port)], cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            get(f"{url}/api/meta")
            return proc, url
        except OSError:  # not listening yet (URLError, a reset, a timeout)
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"optuna-dashboard did not answer on {url}:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    """A race (study r) and a racing search (study s) in one SQLite file, both made by the
    sweeper through the CLI (a few seconds each), and the dashboard serving it: (its URL, the
    file's URL). The server is stopped after the module's tests, whatever they did."""
    cwd = tmp_path_factory.mktemp("dashboard")
    for args in (RACE, SEARCH_HERE):
        r = run_cli([TASK, *args], cwd)
        assert r.returncode == 0, r.stderr[-3000:]
    storage = f"sqlite:///{cwd}/outputs/optuna.db"
    proc, url = serve("sqlite:///outputs/optuna.db", cwd, cwd / "dashboard.log")
    try:
        yield url, storage
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def shown(url: str, name: str) -> list[dict]:
    """The trials of study `name` as the dashboard's API gives them, with user attrs as a dict
    (a JSON value parsed)."""
    ids = {s["study_name"]: s["study_id"] for s in get(f"{url}/api/studies")["study_summaries"]}
    assert sorted(ids) == ["r", "s"]
    trials = get(f"{url}/api/studies/{ids[name]}")["trials"]
    for t in trials:
        t["attrs"] = {a["key"]: _parsed(a["value"]) for a in t["user_attrs"]}
    return trials


def _parsed(value: str):
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value  # a string attr is shown as it is (race_candidate: x=1)


def by_candidate(trials: list[dict], key) -> dict[str, object]:
    return {t["attrs"]["race_candidate"]: key(t) for t in trials}


def verdict(t: dict, key: str = "outcome"):
    """A field of the trial's user attr `race` (None: the sweeper wrote no such attr)."""
    return t["attrs"].get("race", {}).get(key)


@pytest.mark.slow
def test_the_dashboard_lists_a_races_trials_with_their_verdicts(dashboard):
    url, storage = dashboard
    trials = shown(url, "r")
    # race_task.py's table: x=3 is dropped after 2 folds, x=4 after 3; x=1 and the baseline x=2
    # run all 4. One trial per candidate (its folds are one user attr, not trials).
    assert len(trials) == 4
    assert by_candidate(trials, lambda t: t["state"]) == {
        "x=1": "Complete", "x=2": "Complete", "x=3": "Pruned", "x=4": "Pruned"}
    # A survivor's value: its mean over the folds, MEAN + mean(FOLD) + mean(NOISE) by hand:
    # x=1: 0 + 0.15 + 0; x=2: 0.02 + 0.15 + 0.0005.
    values = by_candidate(trials, lambda t: t.get("values"))
    assert values["x=1"] == [pytest.approx(0.15, abs=1e-12)]
    assert values["x=2"] == [pytest.approx(0.1705, abs=1e-12)]
    assert by_candidate(trials, lambda t: sorted(t["attrs"]["race_runs"])) == {
        "x=1": ["fold=0", "fold=1", "fold=2", "fold=3"],
        "x=2": ["fold=0", "fold=1", "fold=2", "fold=3"],
        "x=3": ["fold=0", "fold=1"], "x=4": ["fold=0", "fold=1", "fold=2"]}
    verdicts = by_candidate(trials, lambda t: (verdict(t), verdict(t, "after")))
    assert verdicts == {"x=1": ("survived", "fold=3"), "x=2": ("survived", "fold=3"),
                        "x=3": ("dropped", "fold=1"), "x=4": ("dropped", "fold=2")}
    # ... the outcome our readback gives (qknorm.status, the report).
    study = optuna.load_study(study_name="r", storage=storage)
    rows = readback.elimination(study).rows
    assert {r["candidate"]: (r["outcome"], r["after"]) for r in rows} == verdicts
    # What the dashboard does not show (README): the answer. The baseline x=2 survived, kept,
    # yet 0.02 behind x=1 on every fold: worse.
    assert {r["candidate"]: r["answer"] for r in rows} == {
        "x=1": "best", "x=2": "worse", "x=3": "worse", "x=4": "worse"}


@pytest.mark.slow
def test_the_dashboard_lists_a_searchs_trials_with_their_verdicts(dashboard):
    url, storage = dashboard
    trials = shown(url, "s")
    assert len(trials) == 5  # n_trials=5 proposals, one trial each
    # How each proposal left the search (user attr `race`), in the answer's words: the
    # incumbent is the best.
    words = by_candidate(trials, lambda t: {"incumbent": "best"}.get(verdict(t), verdict(t)))
    check_table(words)  # what race_task.py's table makes of x=1..5
    # The incumbent alone is COMPLETE, with its mean over 4 folds: x=1's and x=5's are both
    # 0.15 by hand (x=5's noise sums to 0).
    states = by_candidate(trials, lambda t: (t["state"], t.get("values")))
    best = next(c for c, w in words.items() if w == "best")
    assert states.pop(best) == ("Complete", [pytest.approx(0.15, abs=1e-12)])
    assert {s for s, _ in states.values()} == {"Pruned"}
    # On this table each proposal left the search with the word of the search's answer, as our
    # readback computes it (against the final incumbent, Holm over every comparison).
    study = optuna.load_study(study_name="s", storage=storage)
    answer = readback.answer_rows(study.get_trials(), study.user_attrs["race"])
    assert {r["candidate"]: r["answer"] for r in answer} == words
