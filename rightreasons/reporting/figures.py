"""Figures of results (every one drawn through :func:`rightreasons.plotting.figure`): curves over image shifts.

Pareto plots are in :mod:`rightreasons.reporting.pareto`; explanation panels in :mod:`rightreasons.explain.visualize`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ..plotting import figure

__all__ = ["plot_shift_curves"]


def plot_shift_curves(path: str | Path, shifts: Sequence[int], curves: Mapping[str, Sequence[float]],
                      title: str | None = None) -> Path:
    """One explanation-similarity-vs-shift curve per model (:func:`rightreasons.distill.shift_similarity`)."""
    with figure(path, size=(6, 3.5)) as (_, axes):
        ax = axes[0, 0]
        for label, values in curves.items():
            ax.plot(list(shifts), list(values), marker="o", markersize=3, label=label)
        ax.set_xlabel("diagonal shift T (pixels)")
        ax.set_ylabel("cosine similarity to T = 0")
        ax.grid(alpha=0.3)
        ax.legend()
        if title:
            ax.set_title(title)
    return Path(path)
