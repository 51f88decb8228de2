"""The one way rightreasons saves a figure: :func:`figure`.

Every figure of the package — explanation panels, Pareto plots, shift curves, the demo's grids — is drawn inside
``with figure(path, ...) as (fig, axes):``; on leaving the block the figure is written (format from the suffix: PNG,
PDF, SVG, ...) atomically. Figures are built as ``matplotlib.figure.Figure`` objects without pyplot, so saving one
works on machines without a display, never opens a window and leaves pyplot's backend and state alone.

This module imports nothing of rightreasons but the atomic-write helper.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from .fileio import atomic_write

__all__ = ["figure"]


@contextmanager
def figure(path: str | os.PathLike, rows: int = 1, cols: int = 1, *, size: tuple[float, float] | None = None,
           title: str | None = None, dpi: int = 120, **subplots: Any) -> Iterator[tuple[Any, Any]]:
    """Yield ``(fig, axes)`` of a ``rows × cols`` grid (``axes`` a 2-D array; ``size`` in inches, default 4 × 3.2 per
    panel), then lay it out, add ``title`` and save it to ``path``. Nothing is written when the block raises."""
    path = Path(path)
    fig = Figure(figsize=size or (4.0 * cols, 3.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False, **subplots)
    yield fig, axes
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".") or "png"))
