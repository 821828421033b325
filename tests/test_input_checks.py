"""Input errors found before anything trains: each is one UserError naming the bad value and
the fix (the command-line side of them: tests/test_failures.py, tests/test_search_inputs.py)."""

from __future__ import annotations

import pytest

from qknorm.config import DataConfig
from qknorm.data import load_text
from qknorm.errors import UserError


def _text_config(path) -> DataConfig:
    return DataConfig(corpus="text", path=str(path), sha256=None)


def test_a_corpus_of_one_symbol_is_refused_with_its_path_and_count(tmp_path):
    # 200 KB of NUL bytes: valid UTF-8, but a model of one symbol reaches loss 0 learning nothing
    path = tmp_path / "nul.txt"
    path.write_bytes(b"\0" * 200_000)
    with pytest.raises(UserError) as e:
        load_text(_text_config(path))
    assert str(path) in str(e.value) and "1 distinct character" in str(e.value)
    assert "at least 2" in str(e.value)


def test_a_corpus_of_two_symbols_is_read(tmp_path):
    path = tmp_path / "ab.txt"
    path.write_text("ab" * 100)
    assert load_text(_text_config(path)) == "ab" * 100
