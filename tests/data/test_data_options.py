"""``rightreasons.data.options``: dataset options are checked for type and range, with the option's name in a
UsageError (what a config's ``data.options`` turns into one ``error:`` line)."""

from __future__ import annotations

import math

import pytest

from rightreasons.data.options import require_int, require_number
from rightreasons.errors import UsageError


@pytest.mark.parametrize("value", [0, 3, 2**40])
def test_require_int_accepts_integers_in_range(value):
    require_int("n", value, 0)


@pytest.mark.parametrize("value, at_most", [(-1, None), (5, 4), (True, None), (1.0, None), ("3", None), (None, None)])
def test_require_int_refuses_other_values_and_names_the_option(value, at_most):
    with pytest.raises(UsageError, match=r"dataset option 'n' must be an integer .*got"):
        require_int("n", value, 0, at_most=at_most)


@pytest.mark.parametrize("value", [0, 0.5, 1, 1.0])
def test_require_number_accepts_numbers_in_range(value):
    require_number("difficulty", value, 0.0, 1.0)


@pytest.mark.parametrize("value", [-0.1, 1.5, math.nan, math.inf, "0.5", True, None])
def test_require_number_refuses_other_values_and_names_the_option(value):
    with pytest.raises(UsageError, match=r"dataset option 'difficulty' must be a number in \[0, 1\], got"):
        require_number("difficulty", value, 0.0, 1.0)


def test_an_unbounded_option_still_refuses_infinity():
    """``box_dilation: .inf`` would grow every box to the whole image."""
    with pytest.raises(UsageError, match="'box_dilation' must be a number >= 0, got inf"):
        require_number("box_dilation", math.inf, 0.0)
