"""Character-level Tiny Shakespeare: find or download the corpus, split it by fold, sample batches.

Contiguous k-fold: fold i validates on the i-th 1/n_folds of the text and trains on the rest.
Training windows are drawn from the pieces before and after the held-out block separately, so no
window straddles it. n_folds=10, fold=9 is nanoGPT's split (the first 90% trains).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch

from qknorm.config import DataConfig
from qknorm.errors import UserError

DATA_DIR_ENV = "QKNORM_DATA_DIR"
CORPUS_SUBPATH = Path("tinyshakespeare") / "input.txt"


def corpus_path(cfg: DataConfig) -> Path:
    """data.path if set, else $QKNORM_DATA_DIR/tinyshakespeare/input.txt, else the user cache."""
    if cfg.path:
        return Path(cfg.path).expanduser()
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser() / CORPUS_SUBPATH
    return Path.home() / ".cache" / "qknorm" / CORPUS_SUBPATH


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def download(url: str, dest: Path, sha256: str | None = None, timeout_s: float = 30.0) -> None:
    """Fetch url into dest: into a temp file beside it, checked against sha256 (when given), then
    renamed into place. A download that breaks off or fails its check leaves nothing at dest:
    the next run would read it and fail the same way until someone deleted it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout_s) as resp:
            shutil.copyfileobj(resp, out)
        if sha256 and (got := sha256_of(tmp)) != sha256:
            raise UserError(f"downloaded {url} but its sha256 is {got}, expected "
                            f"data.sha256={sha256}; nothing was kept at {dest}: check data.url, "
                            "or set data.sha256=null for a corpus of your own")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def load_text(cfg: DataConfig) -> str:
    """The corpus as text, checked against data.sha256; downloads it when missing and allowed."""
    path = corpus_path(cfg)
    if not path.exists():
        if not cfg.url:
            raise UserError(f"corpus not found at {path}; set data.path or ${DATA_DIR_ENV}")
        try:
            download(cfg.url, path, cfg.sha256)
        except OSError as e:
            raise UserError(
                f"corpus not found at {path} and downloading {cfg.url} failed ({e}); "
                f"put the file there, or set data.path or ${DATA_DIR_ENV} to a local copy"
            ) from e
    if cfg.sha256 and sha256_of(path) != cfg.sha256:
        raise UserError(f"checksum mismatch for {path}: sha256 is {sha256_of(path)}, expected "
                        f"data.sha256={cfg.sha256}; replace the file, or set data.sha256=null "
                        "for a corpus of your own")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}); "
                        "give a UTF-8 text file") from e
    if not text:
        raise UserError(f"{path} is empty; give a non-empty text file")
    return text


@dataclass
class Vocab:
    chars: str  # the sorted distinct characters; index = token id

    @classmethod
    def from_text(cls, text: str) -> Vocab:
        return cls("".join(sorted(set(text))))

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, s: str) -> torch.Tensor:
        """Token ids of s; KeyError on a character outside the vocabulary.

        One table lookup over the code points instead of a Python loop over 1.1M characters
        (every job of a sweep pays for this once).
        """
        codes = torch.frombuffer(bytearray(s.encode("utf-32-le")), dtype=torch.int32).long()
        if codes.numel() == 0:
            return torch.zeros(0, dtype=torch.long)
        table_size = max(int(codes.max()), max(map(ord, self.chars), default=0)) + 1
        table = torch.full((table_size,), -1, dtype=torch.long)
        table[torch.tensor([ord(c) for c in self.chars], dtype=torch.long)] = torch.arange(len(self.chars))
        ids = table[codes]
        if bool((ids < 0).any()):
            unknown = sorted({c for c in s if c not in self.chars})
            raise KeyError(f"characters not in the vocabulary: {''.join(unknown)!r}")
        return ids

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def fold_bounds(n: int, n_folds: int, fold: int) -> tuple[int, int]:
    """[lo, hi) of the held-out block; n*9//10 is nanoGPT's int(n*0.9) for the default fold."""
    return n * fold // n_folds, n * (fold + 1) // n_folds


class WindowSampler:
    """Random (x, y) windows of block_size tokens drawn from contiguous segments of one tensor.

    Each window lies inside one segment. Batches index the corpus tensor in place (one gather),
    never copying it.
    """

    def __init__(self, tokens: torch.Tensor, segments: list[tuple[int, int]], block_size: int):
        self.tokens, self.block_size = tokens, block_size
        # Window starts valid in each segment: lo .. hi - block_size - 1 (y needs one more token).
        counts = [max(0, hi - lo - block_size) for lo, hi in segments]
        if sum(counts) == 0:
            raise UserError(f"model.block_size={block_size} leaves no window in segments "
                            f"{segments}; lower model.block_size or data.n_folds")
        self.starts_lo = torch.tensor([lo for lo, _ in segments])
        self.cum = torch.tensor(counts).cumsum(0)
        self.offsets = torch.arange(block_size + 1)

    @property
    def n_windows(self) -> int:
        return int(self.cum[-1])

    def sample(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        u = torch.randint(self.n_windows, (batch_size,), generator=generator)
        seg = torch.searchsorted(self.cum, u, right=True)  # which segment each draw falls in
        before = torch.where(seg > 0, self.cum[seg - 1], torch.zeros_like(u))
        starts = self.starts_lo[seg] + (u - before)
        windows = self.tokens[starts[:, None] + self.offsets]  # (B, T+1)
        return windows[:, :-1], windows[:, 1:]


@dataclass
class Splits:
    vocab: Vocab
    train: WindowSampler
    val: WindowSampler


def load_splits(cfg: DataConfig, block_size: int) -> Splits:
    text = load_text(cfg)
    vocab = Vocab.from_text(text)
    tokens = vocab.encode(text)
    n = len(tokens)
    lo, hi = fold_bounds(n, cfg.n_folds, cfg.fold)
    if hi - lo <= block_size:
        raise UserError(f"model.block_size={block_size} does not fit the validation split of "
                        f"{hi - lo} tokens (data.n_folds={cfg.n_folds}); lower model.block_size "
                        "or data.n_folds")
    train = WindowSampler(tokens, [(0, lo), (hi, n)], block_size)
    val = WindowSampler(tokens, [(lo, hi)], block_size)
    return Splits(vocab, train, val)
