"""hydra_racing_sweeper.units.num, the one number formatter: the digits by size or by spec, and a mark where
there is no number (expected strings written by hand)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hydra_racing_sweeper.units import num


@pytest.mark.parametrize("x, written", [
    (1.234567, "1.2346"), (-0.00005, "-0.0001"), (9.99994, "9.9999"),  # below 10: 4 decimals
    (10, "10.00"), (123.456, "123.46"), (999.994, "999.99"),  # below 1000: 2
    (1000, "1000"), (123456.5, "123456"), (np.float64(3.14159), "3.1416"),  # above: none
    (math.inf, "inf"), (-math.inf, "-inf"),
])
def test_a_number_by_its_size(x, written):
    assert num(x) == written


def test_a_number_by_its_spec():
    assert num(0.5, "+.4f") == "+0.5000" and num(-0.5, "+.4f") == "-0.5000"
    assert num(0.012345, ".3g") == "0.0123" and num(-750.0, "+.0f") == "-750"
    assert num(np.int64(7), ".2f") == "7.00"


@pytest.mark.parametrize("missing", [None, math.nan, np.float64("nan"), pd.NA, pd.NaT])
def test_no_number_is_a_mark(missing):
    assert num(missing) == "-" and num(missing, "+.4f") == "-" and num(missing, ".3f", "–") == "–"
