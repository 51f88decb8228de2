"""Pareto fronts of model evaluations (thesis §7.2) marked per group and plotted; the demo and the sweep use them.

A *point* is one evaluation of one model, a flat mapping with a unique ``"id"``, a ``"group"`` (the configuration whose
front it belongs to, e.g. ``"voc2007/energy-input"``; the thesis takes fronts per configuration across λ values and
epochs) and finite numbers for the objectives (by default ``score`` = F1 or accuracy, ``epg``, ``iou``, all
maximised). :func:`mark_fronts` flags, per group, the points on the Pareto front and the representative one (highest
EPG within 5 p.p. of the best score, :func:`rightreasons.metrics.representative`); :func:`markdown_table`,
:func:`plot_pareto` draws the flagged points (tables: :mod:`rightreasons.reporting.tables`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

from ..metrics import pareto_front, representative
from ..plotting import figure

__all__ = ["LABELS", "OBJECTIVES", "mark_fronts", "plot_pareto"]

#: The objectives of model selection in the thesis: classification score (F1), EPG and IoU.
OBJECTIVES: tuple[str, ...] = ("score", "epg", "iou")

#: Axis and column labels of the metrics the demo and the sweep report.
LABELS = {"score": "score (F1 / accuracy)", "f1": "F1", "accuracy": "accuracy", "epg": "EPG", "iou": "IoU",
          "worst_group_accuracy": "worst-group accuracy"}


def mark_fronts(points: Iterable[Mapping[str, Any]], objectives: Sequence[str] = OBJECTIVES,
                score_key: str = "score", epg_key: str = "epg", max_score_drop: float = 0.05) -> list[dict[str, Any]]:
    """Copies of ``points`` with ``on_front`` and ``representative`` (booleans) set within each ``"group"``.

    ``max_score_drop`` is in the units of ``score_key`` (0.05 = 5 p.p. for scores in [0, 1]). Raises ``ValueError``
    (from :func:`rightreasons.metrics.pareto_front`) for a point without a finite value of an objective or with a
    duplicate id.
    """
    points = [dict(p) for p in points]
    for group in dict.fromkeys(p["group"] for p in points):
        members = [p for p in points if p["group"] == group]
        front = {p["id"] for p in pareto_front(members, objectives)}
        pick = representative(members, max_score_drop, f1_key=score_key, epg_key=epg_key, objectives=objectives)
        for p in members:
            p["on_front"] = p["id"] in front
            p["representative"] = p["id"] == pick["id"]
    return points


def plot_pareto(path: str | Path, points: Sequence[Mapping[str, Any]], panels: Sequence[tuple[str, str]],
                colour_key: str = "group", title: str | None = None) -> Path:
    """Scatter plots of flagged points (:func:`mark_fronts`), one panel per ``(x_key, y_key)``.

    Colours follow ``colour_key``; points on their group's front are solid with a dark edge, the others faint, the
    representative of each group is a star. Values in [0, 1] are shown in percent.
    """
    names = list(dict.fromkeys(str(p[colour_key]) for p in points))
    palette = matplotlib.colormaps["tab10" if len(names) <= 10 else "tab20"]
    colours = {n: palette(i % 20) for i, n in enumerate(names)}
    with figure(path, 1, len(panels), size=(5.2 * len(panels), 4.4), title=title) as (_, axes):
        _draw_panels(axes[0], points, panels, names, colours, colour_key)
    return Path(path)


def _draw_panels(axes: Sequence[Any], points: Sequence[Mapping[str, Any]], panels: Sequence[tuple[str, str]],
                 names: list[str], colours: Mapping[str, Any], colour_key: str) -> None:
    for ax, (x_key, y_key) in zip(axes, panels):
        for name in names:
            mine = [p for p in points if str(p[colour_key]) == name and x_key in p and y_key in p]
            for on_front in (False, True):
                chosen = [p for p in mine if bool(p.get("on_front")) == on_front]
                if chosen:
                    ax.scatter([100 * p[x_key] for p in chosen], [100 * p[y_key] for p in chosen],
                               color=colours[name], alpha=1.0 if on_front else 0.3, s=36,
                               edgecolors="black" if on_front else "none", linewidths=0.6,
                               label=name if on_front or not any(q.get("on_front") for q in mine) else None)
            picks = [p for p in mine if p.get("representative")]
            if picks:
                ax.scatter([100 * p[x_key] for p in picks], [100 * p[y_key] for p in picks], marker="*", s=220,
                           color=colours[name], edgecolors="black", linewidths=0.8, zorder=3)
        ax.set_xlabel(f"{LABELS.get(x_key, x_key)} (%)")
        ax.set_ylabel(f"{LABELS.get(y_key, y_key)} (%)")
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7, loc="best", title="solid: Pareto front, ★: representative", title_fontsize=7)
