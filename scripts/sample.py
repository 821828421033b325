"""Generate text from a trained run: python scripts/sample.py outputs/runs/<stamp> [options]."""

from __future__ import annotations

import argparse
from pathlib import Path

from qknorm.errors import run_main
from qknorm.sample import sample_text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_dir", type=Path, help="a run dir with ckpt.pt (train.save_checkpoint=true)")
    parser.add_argument("--start", default="\n", help="prompt text (default: a newline)")
    parser.add_argument("--tokens", type=int, default=500, help="characters to generate")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(sample_text(args.run_dir, args.start, args.tokens, args.temperature, args.top_k, args.seed))


if __name__ == "__main__":
    run_main(main)
