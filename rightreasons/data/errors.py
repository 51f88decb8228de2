"""The data loaders' warning and message helper.

Every problem with a user's files is reported as a :class:`~rightreasons.errors.DataError` whose message names the
file, the record inside it and what was wrong, e.g. ``VOC2007/Annotations/000005.xml: object 2: unknown class 'kat';
expected one of ...``; :func:`where` builds the ``file: record`` prefix. ``DataError`` takes a single message argument
so that a ``DataLoader`` re-raises it in the main process with the same type when it happened in a worker.
"""

from __future__ import annotations

import os

from ..errors import DataError

__all__ = ["BoxWarning", "DataError", "where"]


class BoxWarning(UserWarning):
    """A box was repaired (clipped to the image or dropped) under the ``box_policy`` of a loader."""


def where(path: str | os.PathLike | None, record: str | None = None) -> str:
    """``"path: record"`` prefix used by every data message (either part may be missing)."""
    parts = [str(p) for p in (path, record) if p not in (None, "")]
    return ": ".join(parts) if parts else "<unknown source>"
