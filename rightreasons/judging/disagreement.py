"""Where the metrics disagree (LATEC, Klein et al., NeurIPS 2024, found that explanation metrics often do): the
Spearman rank correlation between every two metric columns of a judging's rows (models × methods × layers).

Each column is oriented first so that higher is better (a lower-is-better column is negated), so a correlation of
+1 means the two metrics order the rows alike and a negative one means they order them in conflict. A column
without scores in some row is left out; with fewer than three rows the correlations say little (two rows give ±1).
"""

from __future__ import annotations

from typing import Any

import torch

from ..metrics import spearman
from ..reporting.tables import markdown_table

__all__ = ["conflicts", "disagreement_table", "rank_correlations"]


def rank_correlations(rows: list[dict[str, Any]], columns: dict[str, bool]) -> dict[tuple[str, str], float]:
    """``(a, b)`` → Spearman correlation of columns ``a`` and ``b`` over ``rows`` (summary rows, each column an
    :class:`~rightreasons.judging.intervals.Interval`), for every pair of columns scored in every row."""
    means = {c: torch.tensor([r[c].mean for r in rows], dtype=torch.float64) * (1 if higher else -1)
             for c, higher in columns.items()}
    kept = [c for c, m in means.items() if not m.isnan().any()]
    return {(a, b): spearman(means[a], means[b]).item() for i, a in enumerate(kept) for b in kept[i + 1:]}


def conflicts(correlations: dict[tuple[str, str], float]) -> list[tuple[str, str, float]]:
    """The pairs that order the rows in conflict (correlation < 0), most conflicting first."""
    return sorted(((a, b, r) for (a, b), r in correlations.items() if r < 0), key=lambda t: t[2])


def disagreement_table(correlations: dict[tuple[str, str], float]) -> str:
    """A Markdown matrix of the correlations (blank on the diagonal and for columns without scores)."""
    names = list(dict.fromkeys(name for pair in correlations for name in pair))
    rows = [{"metric": a, **{b: correlations.get((a, b), correlations.get((b, a))) for b in names if b != a}}
            for a in names]
    return markdown_table(rows, ["metric", *names])
