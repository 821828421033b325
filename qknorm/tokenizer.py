"""Tokenizers of the data group (`data.tokenizer`): char, byte and byte-level BPE.

Each maps text to token ids and back, and knows what every token id stands for in the text:
`n_chars[id]` characters and `n_bytes[id]` UTF-8 bytes. That is what makes losses comparable
across tokenizers: a model's loss in nats per token becomes bits per character as

    bits per char = sum of token losses / (ln 2 * characters those tokens cover)

and likewise per byte. A character is counted at its first byte, so a BPE token holding the
last byte of "é" covers no character and the one holding its first byte covers it: over any
whole text the counts add up to len(text) and len(text.encode()).

    >>> tok = ByteTokenizer()
    >>> ids = tok.encode("né")          # n, then é's two UTF-8 bytes
    >>> ids.tolist(), tok.n_chars[ids].tolist(), tok.n_bytes[ids].tolist()
    ([110, 195, 169], [1, 1, 0], [1, 1, 1])

The BPE is Hugging Face `tokenizers`' byte-level BPE, trained here on the training text of
the fold (never on the held-out block) and cached by (corpus sha256, fold layout, fold,
vocabulary size) under $QKNORM_CACHE_DIR (default ~/.cache/qknorm). Parallel jobs that need
the same tokenizer take a file lock: one trains it, writes it beside its final name and renames
it into place; the others wait and read it. Nothing is ever downloaded.
"""

from __future__ import annotations

import fcntl
import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch

from qknorm.config import BYTE_SYMBOLS
from qknorm.errors import UserError

CACHE_DIR_ENV = "QKNORM_CACHE_DIR"


def _leading(bytes_: torch.Tensor) -> torch.Tensor:
    """1 where a UTF-8 byte starts a character (it is not a continuation byte 10xxxxxx)."""
    return ((bytes_ & 0xC0) != 0x80).long()


class CharTokenizer:
    """One token per distinct character of the corpus, sorted (nanoGPT's shakespeare_char)."""

    name = "char"

    def __init__(self, chars: str):
        self.chars = chars  # the sorted distinct characters; index = token id
        self.n_chars = torch.ones(len(chars), dtype=torch.long)
        self.n_bytes = torch.tensor([len(c.encode("utf-8")) for c in chars], dtype=torch.long)

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, s: str) -> torch.Tensor:
        """Token ids of s; KeyError on a character outside the vocabulary.

        One table lookup over the code points instead of a Python loop over 1.1M characters
        (every job of a sweep pays for this once).
        """
        if not s:
            return torch.zeros(0, dtype=torch.long)
        codes = torch.frombuffer(bytearray(s.encode("utf-32-le")), dtype=torch.int32).long()
        table_size = max(int(codes.max()), max(map(ord, self.chars), default=0)) + 1
        table = torch.full((table_size,), -1, dtype=torch.long)
        table[torch.tensor([ord(c) for c in self.chars], dtype=torch.long)] = torch.arange(len(self.chars))
        ids = table[codes]
        if bool((ids < 0).any()):
            unknown = sorted({c for c in s if c not in self.chars})
            raise KeyError(f"characters not in the vocabulary: {''.join(unknown)!r}")
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)


class ByteTokenizer:
    """The UTF-8 bytes of the text: 256 tokens, any text."""

    name = "byte"

    def __init__(self):
        self.n_bytes = torch.ones(BYTE_SYMBOLS, dtype=torch.long)
        self.n_chars = _leading(torch.arange(BYTE_SYMBOLS))

    def __len__(self) -> int:
        return BYTE_SYMBOLS

    def encode(self, s: str) -> torch.Tensor:
        data = s.encode("utf-8")
        if not data:
            return torch.zeros(0, dtype=torch.long)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


def _byte_of_symbol() -> dict[str, int]:
    """The byte-level pre-tokenizer's alphabet, symbol -> byte: GPT-2's reversible map of the
    256 bytes to printable characters. Bytes that print as themselves keep their code point;
    the other 68 (controls, space, DEL, NBSP, soft hyphen) take 256, 257, ... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    out = {chr(b): b for b in printable}
    shifted = [b for b in range(BYTE_SYMBOLS) if b not in set(printable)]
    out.update({chr(BYTE_SYMBOLS + i): b for i, b in enumerate(shifted)})
    return out


class BpeTokenizer:
    """A trained byte-level BPE (Hugging Face `tokenizers`), with each token's bytes known."""

    name = "bpe"

    def __init__(self, hf_tokenizer):
        self.hf = hf_tokenizer
        byte_of = _byte_of_symbol()
        vocab = hf_tokenizer.get_vocab()  # symbol string -> id
        token_bytes = [b""] * len(vocab)
        for symbols, i in vocab.items():
            token_bytes[i] = bytes(byte_of[s] for s in symbols)
        self.token_bytes = token_bytes
        self.n_bytes = torch.tensor([len(b) for b in token_bytes], dtype=torch.long)
        self.n_chars = torch.tensor([sum((c & 0xC0) != 0x80 for c in b) for b in token_bytes],
                                    dtype=torch.long)

    def __len__(self) -> int:
        return len(self.token_bytes)

    def encode(self, s: str) -> torch.Tensor:
        return torch.tensor(self.hf.encode(s).ids, dtype=torch.long)

    def decode(self, ids: Iterable[int]) -> str:
        return b"".join(self.token_bytes[int(i)] for i in ids).decode("utf-8", errors="replace")


Tokenizer = CharTokenizer | ByteTokenizer | BpeTokenizer  # what data.tokenizer builds


def _hf_tokenizers():
    """Hugging Face `tokenizers`, or one line saying how to install it."""
    try:
        import tokenizers
    except ImportError as e:
        raise UserError("data.tokenizer=bpe needs Hugging Face tokenizers: "
                        "pip install 'qknorm[bpe]'") from e
    return tokenizers


def train_bpe(texts: list[str], vocab_size: int):
    """A byte-level BPE of vocab_size tokens trained on texts (a merge never crosses two of
    them); UserError when the texts cannot give that many."""
    hf = _hf_tokenizers()
    decoders, models, pre_tokenizers, trainers = hf.decoders, hf.models, hf.pre_tokenizers, hf.trainers
    tok = hf.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    if tok.get_vocab_size() < vocab_size:
        raise UserError(f"data.vocab_size={vocab_size} does not fit: the fold's training text "
                        f"gives a BPE of {tok.get_vocab_size()} tokens at most; lower "
                        "data.vocab_size or use a longer text")
    return tok


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "qknorm")


def cached_bpe(key: str, texts: list[str], vocab_size: int) -> tuple[BpeTokenizer, bool]:
    """The BPE cached under key, trained (on texts) and written first if missing; the second
    value says whether this call trained it. One lock per key, so parallel jobs train it once."""
    path = cache_dir() / "tokenizers" / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also on a crash
        if path.exists():
            return BpeTokenizer(_hf_tokenizers().Tokenizer.from_file(str(path))), False
        hf = train_bpe(texts, vocab_size)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        os.close(fd)
        try:
            hf.save(tmp)
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    return BpeTokenizer(hf), True


def text_per_token(tok: Tokenizer, batches) -> dict[str, float]:
    """The characters and UTF-8 bytes of text one target token of these (x, y) batches covers,
    on average: what turns their mean loss into bits per character and per byte (bits_per)."""
    targets = torch.cat([y.flatten() for _, y in batches]).cpu()
    return {"char": tok.n_chars[targets].double().mean().item(),
            "byte": tok.n_bytes[targets].double().mean().item()}


def bits_per(loss: float, text_per_token: float) -> float:
    """Mean loss in nats per token -> bits per character (or byte): every eval batch holds the
    same number of tokens, so sum(loss) / (ln 2 * sum(covered)) is this ratio of means."""
    return loss / (math.log(2) * text_per_token)
