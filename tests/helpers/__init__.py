"""Code the tests share (as lightning-hydra-template's tests/helpers/): fixtures' building blocks,
scripts the tests start as processes, tables with known answers. Test modules import from here,
never from each other (tests/test_faces.py checks it)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout: conf/, scripts/, docs/ and tests/
