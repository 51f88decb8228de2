"""Argument types for the command-line parsers: numbers checked for their range while the command line is parsed.

argparse calls a type with the argument's text; an :class:`argparse.ArgumentTypeError` becomes the usual one-line
``error: argument --NAME: ...`` with exit code 2, before any work starts. Without these, an out-of-range number either
ended in a traceback from deep inside (``--batch-size 0``) or, where the command treats a falsy value as "not given",
silently became the default (``--image-size 0``).

Imports nothing of rightreasons, so that every command module can use it without loading torch.
"""

from __future__ import annotations

import argparse
import math

__all__ = ["non_negative_int", "positive_int", "unit_float"]


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1 (counts, sizes, batch sizes)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0 (seeds, shifts, split sizes that may be empty)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text}")
    return value


def unit_float(text: str) -> float:
    """A number in [0, 1] (fractions, correlations, thresholds); ``nan`` is refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text}")
    return value
