"""Corpus, vocabulary, contiguous k-fold splits and window sampling."""

from __future__ import annotations

import torch

from qknorm.config import DataConfig
from qknorm.data import WindowSampler, fold_bounds, load_splits, load_text

N_CHARS = 1_115_394  # Tiny Shakespeare, per its README in shared/data


def test_corpus_and_vocab():
    sha256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
    splits = load_splits(DataConfig(sha256=sha256), 64)
    assert len(load_text(DataConfig())) == N_CHARS
    assert len(splits.tokenizer) == 65
    assert splits.tokenizer.chars[:2] == "\n "
    assert splits.tokenizer.decode(splits.tokenizer.encode("First Citizen:")) == "First Citizen:"


def test_default_fold_is_nanogpt_split():
    lo, hi = fold_bounds(N_CHARS, 10, 9)
    assert (lo, hi) == (int(N_CHARS * 0.9), N_CHARS)  # 1,003,854 train / 111,540 val tokens
    assert hi - lo == 111_540


def test_folds_tile_the_corpus():
    bounds = [fold_bounds(N_CHARS, 5, i) for i in range(5)]
    assert bounds[0][0] == 0 and bounds[-1][1] == N_CHARS
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))


def test_windows_never_straddle_the_held_out_block():
    tokens = torch.arange(1000)
    block = 8
    sampler = WindowSampler(tokens, [(0, 400), (500, 1000)], block)
    assert sampler.n_windows == (400 - block) + (500 - block)
    x, y = sampler.sample(20_000, torch.Generator().manual_seed(0))
    window = torch.cat([x, y[:, -1:]], dim=1)  # (B, T+1): tokens are their own positions
    in_first = window[:, -1] < 400
    in_second = window[:, 0] >= 500
    assert bool((in_first | in_second).all())
    assert torch.equal(y[:, :-1], x[:, 1:])
    # every valid start is reachable: the extremes of both segments appear
    starts = set(x[:, 0].tolist())
    assert {0, 400 - block - 1, 500, 1000 - block - 1} <= starts


def test_sampler_indexes_the_corpus_without_copying_it():
    tokens = torch.arange(100)
    sampler = WindowSampler(tokens, [(0, 100)], 4)
    assert sampler.tokens.data_ptr() == tokens.data_ptr()


def test_validation_windows_come_from_the_held_out_fold():
    splits = load_splits(DataConfig(n_folds=5, fold=2), 64)
    lo, hi = fold_bounds(N_CHARS, 5, 2)
    x, _ = splits.val.sample(256, torch.Generator().manual_seed(1))
    text_tokens = splits.tokenizer.encode(load_text(DataConfig())[lo:hi])
    # each validation window is a substring of the held-out block
    for row in x[:8]:
        starts = (text_tokens[:-64] == row[0]).nonzero().flatten()
        assert any(torch.equal(text_tokens[s:s + 64], row) for s in starts.tolist())


def test_a_download_that_fails_its_checksum_leaves_nothing_where_the_next_run_reads(
        tmp_path, monkeypatch):
    import hashlib

    import pytest

    from qknorm.errors import UserError

    source = tmp_path / "served.txt"  # a file:// URL stands for the server (no internet here)
    source.write_text("To be, or not to be\n", encoding="utf-8")
    good = hashlib.sha256(source.read_bytes()).hexdigest()
    # downloaded where the corpus is looked for without data.path: $QKNORM_DATA_DIR's copy
    monkeypatch.setenv("QKNORM_DATA_DIR", str(tmp_path / "cache"))
    dest = tmp_path / "cache" / "tinyshakespeare" / "input.txt"
    bad = DataConfig(url=source.as_uri(), sha256="0" * 64)
    with pytest.raises(UserError) as e:
        load_text(bad)
    assert str(e.value) == (
        f"downloaded {source.as_uri()} but its sha256 is {good}, expected data.sha256={'0' * 64}; "
        f"nothing was kept at {dest}: check data.url, or set data.sha256=null for a corpus of "
        "your own")
    assert list(dest.parent.iterdir()) == []  # no corpus, no temp file
    with pytest.raises(UserError, match="^downloaded "):  # the next run downloads again
        load_text(bad)
    assert load_text(DataConfig(url=source.as_uri(), sha256=good)) == "To be, or not to be\n"
    assert [p.name for p in dest.parent.iterdir()] == ["input.txt"]


def test_a_data_path_that_does_not_exist_is_named_and_never_downloaded_into(tmp_path):
    """data.path is the user's file: a missing one is a mistake (a typo), not a place to put
    Tiny Shakespeare (data.url, which the default config keeps) under the user's name."""
    import pytest

    from qknorm.errors import UserError

    source = tmp_path / "served.txt"  # would download fine: nothing may be fetched all the same
    source.write_text("To be, or not to be\n", encoding="utf-8")
    missing = tmp_path / "no" / "such.txt"
    with pytest.raises(UserError) as e:
        load_text(DataConfig(path=str(missing), url=source.as_uri(), sha256=None))
    assert str(e.value) == (
        f"data.path={missing} does not exist (nothing is downloaded into a path you give); give "
        "the path of your copy of the corpus, or drop data.path to read it from "
        "$QKNORM_DATA_DIR or the user cache, downloaded there when missing")
    assert list(tmp_path.iterdir()) == [source]  # no folder made, no file fetched
