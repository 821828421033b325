"""Bad input, divergence and multirun failures through the real command line (issue 6).

Every user mistake must end as: exit code 2, ONE stderr line naming the value and the fix, no
traceback on the console, and no final.json anywhere (nothing a report would count).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qknorm import rundir
from tests.helpers import REPO
from tests.helpers.cli import assert_one_line_error

SMOKE = ["experiment=smoke", "threads=1", "train.max_iters=10"]
TINY = "hello world, this is a tiny corpus.\n" * 30  # 1080 chars: a val split of 108 tokens

# (id, overrides, [substrings the one line must contain], composed: refused before a run dir
# exists, by Hydra while composing or by the config's checks (cli.preflight); otherwise the
# job starts, finds the mistake in the corpus, and logs the trace in its train.log)
BAD_INPUTS = [
    ("p_below_1", ["norm.p=0.5"], ["norm.p=0.5", "use a float >= 1 or inf"], True),
    ("p_nan", ["norm.p=nan"], ["norm.p=nan", "use a float >= 1 or inf"], True),
    ("p_string", ["norm.p=abc"], ["norm.p=abc", "give norm.p a number (or inf)"], True),
    ("norm_group", ["norm=foo"], ["norm=foo", "pick one of l2, lp, none, rms"], True),
    ("norm_kind", ["norm.kind=foo"], ["norm.kind='foo'", "none, l2, lp, rms"], True),
    ("unknown_key", ["model.n_layers=2"],
     ["model.n_layers is not a config key", "did you mean model.n_layer?"], True),
    ("appended_key", ["+model.n_layers=2"],
     ["model.n_layers is not a config key", "did you mean model.n_layer?"], True),
    ("n_embd_n_head", ["model.n_embd=33", "model.n_head=2"],
     ["model.n_embd=33", "model.n_head=2", "multiple of n_head"], True),
    ("negative_lr", ["optimizer.lr=-1"], ["optimizer.lr=-1.0", "optimizer.lr=1e-3"], True),
    ("fold_range", ["data.fold=10"], ["data.fold=10", "use 0..9"], True),
    ("block_vs_val", ["data.path=tiny.txt", "data.sha256=null", "model.block_size=200"],
     ["model.block_size=200", "108 tokens", "lower model.block_size or data.n_folds"], False),
    # the user's own path, missing: named, and nothing downloaded into it (data.url is set)
    ("missing_path", ["data.path=no/such.txt", "data.url=http://127.0.0.1:9/x"],
     ["data.path=no/such.txt does not exist (nothing is downloaded into a path you give)",
      "drop data.path"], True),
    ("checksum", ["data.path=tiny.txt", f"data.sha256={'0' * 64}"],
     ["checksum mismatch for tiny.txt", "data.sha256=null"], False),
    ("empty_corpus", ["data.path=empty.txt", "data.sha256=null"],
     ["empty.txt is empty", "non-empty text file"], False),
    ("non_utf8", ["data.path=latin1.txt", "data.sha256=null"],
     ["latin1.txt is not UTF-8", "give a UTF-8 text file"], False),
    # 200 KB of NUL bytes: one symbol, which a model predicts at loss 0 learning nothing
    ("one_symbol", ["data.path=nul.txt", "data.sha256=null"],
     ["nul.txt has 1 distinct character", "at least 2"], False),
    # issue 67: a count of 0 (a ZeroDivisionError), a width no memory holds (the allocator's
    # trace), a run dir under a file (a NotADirectoryError from Hydra's mkdir)
    ("n_head_zero", ["model.n_head=0"], ["model.n_head=0 must be >= 1"], True),
    ("too_wide", ["model.n_embd=1000000", "model.n_head=1"],
     ["model.n_embd=1000000 model.n_layer=1 does not fit: the model's weights need about",
      "lower model.n_embd or model.n_layer"], True),
    ("run_dir_under_file", ["hydra.run.dir=tiny.txt/out"],
     ["hydra.run.dir=tiny.txt/out cannot be written: tiny.txt is a file, not a folder; give "
      "hydra.run.dir a folder you can write to"], True),
    ("progress_negative", ["tracker.progress_s=-1"],
     ["tracker.progress_s=-1.0", "seconds >= 0 (0: no progress line)"], True),
    ("sweep_without_m", ["norm.p=1,2"], ["norm.p=1,2", "add -m"], True),
    # the data group (issue 37)
    ("text_without_path", ["data=text"], ["data=text", "add data.path=<a UTF-8 file>"], True),
    ("text_missing", ["data=text", "data.path=nope.txt"],
     ["data.path=nope.txt does not exist", "give the path of a UTF-8 text file"], True),
    ("text_too_short", ["data=text", "data.path=short.txt"],
     ["model.block_size=32", "validation split of 4 tokens", "use a longer text"], False),
    ("tokenizer_name", ["data.tokenizer=word"], ["data.tokenizer='word'", "char, byte, bpe"], True),
    ("bpe_vocab_below_bytes", ["data.tokenizer=bpe", "data.vocab_size=100"],
     ["data.vocab_size=100 does not fit", "data.vocab_size > 256"], True),
    ("bpe_vocab_beyond_text", ["data=text", "data.path=tiny.txt", "data.tokenizer=bpe",
                               "data.vocab_size=5000"],
     ["data.vocab_size=5000 does not fit", "gives a BPE of", "lower data.vocab_size"], False),
]


def _write_corpora(cwd: Path) -> None:
    (cwd / "tiny.txt").write_text(TINY)
    (cwd / "empty.txt").write_text("")
    (cwd / "nul.txt").write_bytes(b"\0" * 200_000)
    (cwd / "short.txt").write_text("a few words\n" * 3)  # 36 characters: 4 in the last fold
    (cwd / "latin1.txt").write_bytes("caf\xe9 na\xefve\n".encode("latin-1") * 50)


@pytest.mark.slow
@pytest.mark.parametrize("overrides, needles, composed",
                         [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_is_one_line_and_writes_no_result(cli, overrides, needles, composed):
    _write_corpora(cli.cwd)
    r = cli("-m", "qknorm.train", *SMOKE, *overrides)
    assert_one_line_error(r, *needles)
    assert not list(cli.cwd.rglob(rundir.FINAL_FILE))
    assert not list(cli.cwd.rglob(rundir.METRICS_FILE))
    runs = list((cli.cwd / "outputs" / "runs").glob("*")) if not composed else []
    if composed:  # rejected while composing: no run dir at all
        assert not (cli.cwd / "outputs").exists()
    else:  # the job refused before training; the full trace is in its log, not on the console
        (run_dir,) = runs
        log = (run_dir / "train.log").read_text()
        assert "Traceback" in log and "UserError" in log


@pytest.mark.slow
@pytest.mark.parametrize("overrides, line", [
    (["hydra.sweep.dir=tiny.txt/sweep"], "error: hydra.sweep.dir=tiny.txt/sweep cannot be "
     "written: tiny.txt is a file, not a folder; give hydra.sweep.dir a folder you can write to"),
    (["hydra.sweeper.storage=sqlite:///tiny.txt/optuna.db", "hydra.sweeper.dry_run=true"],
     "error: hydra.sweeper.storage='sqlite:///tiny.txt/optuna.db' cannot be written: tiny.txt is "
     "a file, not a folder; give hydra.sweeper.storage a file in a folder you can write to"),
    # each job would refuse itself at its start (qknorm/memory.py), after the study was made
    (["model.n_embd=1000000", "model.n_head=1", "hydra.sweeper.dry_run=true"],
     "error: model.n_embd=1000000 model.n_layer=1 does not fit: the model's weights need about "
     "192000.0 GB (at least 12 x model.n_layer x model.n_embd^2 float32, each with its gradient "
     "and AdamW's two moments) and this "),
], ids=["sweep_dir", "storage_dry_run", "too_wide_dry_run"])
def test_a_sweep_that_could_not_write_its_outputs_is_refused_before_its_study(cli, overrides, line):
    """A sweep dir under a file failed late: the study was made, then every trial failed with a
    traceback in its log. A storage under a file passed the dry run. Both: one line, exit 2,
    nothing made."""
    _write_corpora(cli.cwd)
    r = cli("-m", "qknorm.train", "search=p_grid", *SMOKE, *overrides)
    assert r.returncode == 2 and r.stderr.strip().startswith(line), r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (cli.cwd / "outputs").exists()


@pytest.mark.slow
def test_multirun_validates_every_job_before_any_starts(cli):
    r = cli("-m", "qknorm.train", "-m", *SMOKE, "norm.p=2,0.5")
    line = assert_one_line_error(r, "norm.p=0.5", "multirun job #1", "no job was started")
    assert "use a float >= 1" in line
    assert not (cli.cwd / "outputs").exists()  # job #0 (p=2, valid) never ran either


@pytest.mark.slow
def test_multirun_checks_every_jobs_memory_before_any_starts(cli):
    """Job #1 would refuse itself at its start (qknorm/memory.py), after job #0 trained."""
    r = cli("-m", "qknorm.train", "-m", *SMOKE, "model.n_head=1", "model.n_embd=32,1000000")
    assert_one_line_error(r, "error: model.n_embd=1000000 model.n_layer=1 does not fit: the "
                          "model's weights need about 192000.0 GB", "[multirun job #1: ",
                          "no job was started")
    assert not (cli.cwd / "outputs").exists()


@pytest.mark.slow
def test_a_search_whose_key_is_fixed_says_so_before_any_study(cli):
    """search=p_tpe searches 1/norm.p; norm.p=3 on the command line removes that param (and
    any other on norm.p), which leaves nothing to search: one line, exit 2, no study."""
    r = cli("-m", "qknorm.train", "search=p_tpe", *SMOKE, "norm.p=3")
    assert_one_line_error(r, "norm.p=3 fixes every key the search searches",
                          "(python -m qknorm.train norm.p=3)")
    assert not (cli.cwd / "outputs" / "optuna.db").exists()


@pytest.mark.slow
def test_hydra_commands_still_work(cli):
    r = cli("-m", "qknorm.train", "experiment=smoke", "norm.p=3", "--cfg", "job")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^  p: 3\.0$", r.stdout, re.M) and "resume: false" in r.stdout
    r = cli("-m", "qknorm.train", "--info", "defaults")
    assert r.returncode == 0, r.stderr
    assert "norm/lp" in r.stdout
    assert not (cli.cwd / "outputs").exists()


def test_hydra_full_error_still_gives_the_trace(cli):
    r = cli("-m", "qknorm.train", "norm.p=abc", env={"HYDRA_FULL_ERROR": "1"})
    assert r.returncode != 0
    assert "Traceback" in r.stderr and "ConfigCompositionException" in r.stderr


# --- divergence -------------------------------------------------------------------------------

DIVERGE = ["optimizer.lr=1e6", "optimizer.min_lr=0"]  # NaN at step 2 of the smoke model (checked)


@pytest.mark.slow
def test_diverged_run_is_recorded_with_its_step(cli):
    r = cli("-m", "qknorm.train", *SMOKE, *DIVERGE)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diverged: loss became nan at step"), r.stderr
    assert "lower optimizer.lr" in lines[0] and "Traceback" not in r.stderr + r.stdout
    (run_dir,) = (cli.cwd / "outputs" / "runs").iterdir()
    final = rundir.read_final(run_dir)
    assert final["status"] == "diverged"
    assert final["diverged_step"] == 2  # AdamW at lr=1e6: step 0 and 1 finite, step 2 NaN
    assert f"step {final['diverged_step']}" in lines[0] and final["error"] in lines[0]
    assert "Traceback" in (run_dir / "train.log").read_text()


@pytest.mark.slow
def test_diverged_job_does_not_stop_the_multirun(cli):
    r = cli("-m", "qknorm.train", "-m", *SMOKE, "optimizer.min_lr=0",
            "optimizer.lr=1e-3,1e6,2e-3")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    summary = r.stderr.strip().splitlines()[-1]
    assert summary.startswith("error: multirun finished with failed jobs (2 completed, 1 diverged)")
    assert "loss became nan at step 2" in summary
    (sweep,) = (cli.cwd / "outputs" / "sweeps" / "smoke").iterdir()
    statuses = {j.name: rundir.read_final(j)["status"] for j in sweep.iterdir() if j.is_dir()}
    assert statuses == {"0": "completed", "1": "diverged", "2": "completed"}  # job 2 ran after 1


# --- safety -----------------------------------------------------------------------------------

UNSAFE = re.compile(r"(?<![\w.])(eval|exec)\(|shell\s*=\s*True|os\.system\(|os\.popen\(")


def test_no_config_value_reaches_eval_or_a_shell():
    sources = [p for d in ("qknorm", "scripts", "hydra_plugins") for p in (REPO / d).rglob("*.py")]
    assert any(p.name == "train.py" for p in sources)
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in sources
                 for n, line in enumerate(p.read_text().splitlines(), 1) if UNSAFE.search(line)]
    assert offenders == []


def test_unsafe_pattern_catches_what_it_should():
    assert UNSAFE.search("eval(cfg.x)") and UNSAFE.search("subprocess.run(c, shell=True)")
    assert UNSAFE.search("os.system(cmd)") and not UNSAFE.search("model.eval()")
