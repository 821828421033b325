"""A fold is cut in characters, then each piece is tokenized (qknorm/data.py): with a tokenizer
whose tokens are not characters the held-out text is still the character slice of the fold."""

from __future__ import annotations

from qknorm.config import DataConfig
from qknorm.data import WindowSampler, load_splits

# Four 2-byte characters, then five ASCII ones: 9 characters, 13 UTF-8 bytes. With 3 folds,
# fold 1 holds out characters [9*1//3, 9*2//3) = [3, 6): "ë a". Cut in bytes instead, it
# would be bytes [13//3, 26//3) = [4, 8): "êë", which is why the multibyte part comes first.
TEXT = "éèêë abcd"
HELD_OUT = "ë a"
TRAIN = ("éèê", "bcd")


def _segments(sampler: WindowSampler) -> list[tuple[int, int]]:
    """The sampler's [lo, hi) segments of its token tensor: a segment of n tokens has
    n - block_size window starts, counted cumulatively in `cum`."""
    counts = sampler.cum.diff(prepend=sampler.cum.new_zeros(1)).tolist()
    return [(lo, lo + count + sampler.block_size)
            for lo, count in zip(sampler.starts_lo.tolist(), counts, strict=True)]


def test_byte_tokens_hold_out_the_character_slice_of_the_fold(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_text(TEXT, encoding="utf-8")
    cfg = DataConfig(corpus="text", path=str(path), n_folds=3, fold=1, tokenizer="byte")
    splits = load_splits(cfg, block_size=1)
    tok, tokens = splits.tokenizer, splits.train.tokens

    def text(segment: tuple[int, int]) -> str:
        return tok.decode(tokens[segment[0]:segment[1]].tolist())

    assert [text(s) for s in _segments(splits.val)] == [HELD_OUT]
    assert tuple(text(s) for s in _segments(splits.train)) == TRAIN
    assert len(tokens) == len(TEXT.encode("utf-8")) == 13  # every byte is in one piece
