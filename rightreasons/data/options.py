"""Checks of dataset options: the values a config's ``data.options`` (or a caller of ``load_dataset``) gives a loader.

Options arrive from YAML and command-line overrides, so a string can stand where a number belongs (``nan`` is a
string in YAML) and numbers can be out of range. Each check raises :class:`~rightreasons.errors.UsageError` naming the
option, what it must be and what it got, so the command line reports one ``error:`` line instead of a ``TypeError``
from a comparison deep inside a loader.
"""

from __future__ import annotations

import math

from ..errors import UsageError

__all__ = ["require_int", "require_number"]


def require_int(option: str, value: object, at_least: int, *, at_most: int | None = None, why: str = "") -> None:
    """Refuse ``value`` of ``option`` unless it is an integer (not a bool) in ``[at_least, at_most]``; ``why``
    explains the bound in the message."""
    fits = isinstance(value, int) and not isinstance(value, bool) and value >= at_least \
        and (at_most is None or value <= at_most)
    if not fits:
        bound = f">= {at_least}" if at_most is None else f"in {at_least}..{at_most}"
        raise UsageError(f"dataset option {option!r} must be an integer {bound}{f' ({why})' if why else ''}, "
                         f"got {value!r}")


def require_number(option: str, value: object, at_least: float, at_most: float = math.inf) -> None:
    """Refuse ``value`` of ``option`` unless it is a finite real number (int or float, not a bool, NaN or ±inf) in
    ``[at_least, at_most]``."""
    fits = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and at_least <= value <= at_most
    if not fits:
        bound = f">= {at_least:g}" if at_most == math.inf else f"in [{at_least:g}, {at_most:g}]"
        raise UsageError(f"dataset option {option!r} must be a number {bound}, got {value!r}")
