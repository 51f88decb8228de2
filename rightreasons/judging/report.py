"""What a judging writes: the table (Markdown and CSV, mean and 95 % bootstrap interval per metric), the per-image
scores (CSV), the figure (one panel per metric, a bar with its interval per model, method and layer) and where the
metrics disagree (:mod:`.disagreement`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..fileio import write_text_atomic
from ..plotting import figure
from ..reporting.tables import markdown_table, write_csv
from .disagreement import conflicts, disagreement_table, rank_correlations
from .intervals import Interval
from .judge import Judgement

__all__ = ["FILES", "csv_columns", "disagreement_text", "interval_cell", "write_report"]

FILES = {"table": "table.md", "csv": "table.csv", "scores": "scores.csv", "figure": "figure.png",
         "disagreement": "disagreement.md"}
"""What :func:`write_report` writes into its directory."""
KEYS = ("model", "method", "layer", "images")


def interval_cell(interval: Interval) -> str:
    """``mean [low, high]`` to 3 decimals (blank without scores)."""
    if not interval.n:
        return ""
    return f"{interval.mean:.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def csv_columns(columns: dict[str, bool]) -> list[str]:
    """The CSV table's columns: the keys, then per metric column its mean, bounds and number of images scored."""
    return [*KEYS, *(f"{c}{s}" for c in columns for s in ("", "_low", "_high", "_n"))]


def _csv_row(row: dict[str, Any], columns: dict[str, bool]) -> dict[str, Any]:
    out = {k: row[k] for k in KEYS}
    for c in columns:
        interval = row[c]
        out.update({c: interval.mean, f"{c}_low": interval.low, f"{c}_high": interval.high, f"{c}_n": interval.n})
    return out


def _figure(path: Path, rows: list[dict[str, Any]], columns: dict[str, bool]) -> None:
    """One panel per column: a bar per row at its mean, the whisker its interval."""
    cols = min(len(columns), 4)
    with figure(path, math.ceil(len(columns) / cols), cols, size=(3.6 * cols, 3.0 * math.ceil(len(columns) / cols)),
                title="mean and 95 % bootstrap interval over images") as (_, axes):
        labels = [f"{r['model']}\n{r['method']}@{r['layer']}" for r in rows]
        for ax, (column, higher) in zip(axes.flat, columns.items()):
            intervals = [r[column] for r in rows]
            means = [i.mean for i in intervals]
            errors = [[i.mean - i.low for i in intervals], [i.high - i.mean for i in intervals]]
            ax.bar(range(len(rows)), means, yerr=errors, capsize=3, color="tab:blue")
            ax.set_xticks(range(len(rows)), labels, rotation=45, ha="right", fontsize=7)
            ax.set_title(f"{column} ({'higher' if higher else 'lower'} is better)", fontsize=9)
        for ax in list(axes.flat)[len(columns):]:
            ax.axis("off")


def disagreement_text(rows: list[dict[str, Any]], columns: dict[str, bool]) -> str:
    """Markdown: the rank correlations between the metrics over the rows and the pairs in conflict."""
    correlations = rank_correlations(rows, columns)
    if not correlations:
        return "Fewer than two metrics scored on every row: nothing to compare.\n"
    found = conflicts(correlations)
    listed = "".join(f"- {a} vs {b}: {r:+.2f}\n" for a, b, r in found) or "- none: every pair orders the rows alike\n"
    return (f"Spearman rank correlation between the metrics over the {len(rows)} rows (model, method, layer), each "
            "oriented so that higher is better: negative means the two metrics order the rows in conflict."
            + (" With fewer than three rows every correlation is ±1." if len(rows) < 3 else "") + "\n\n"
            + disagreement_table(correlations) + "\nIn conflict:\n\n" + listed)


def write_report(judgement: Judgement, out: str | Path, seed: int = 0) -> dict[str, Path]:
    """Write :data:`FILES` into directory ``out`` (which must exist); returns what → path."""
    out, columns = Path(out), judgement.columns
    rows = judgement.summary(seed)
    paths = {what: out / name for what, name in FILES.items()}
    arrows = [f"{c} {'↑' if higher else '↓'}" for c, higher in columns.items()]
    cells = [{**{k: r[k] for k in KEYS}, **{c: interval_cell(r[c]) for c in columns}} for r in rows]
    write_text_atomic(paths["table"], "Mean and 95 % percentile-bootstrap interval over images (seed "
                      f"{seed}); ↑ higher is better, ↓ lower.\n\n"
                      + markdown_table(cells, [*KEYS, *columns], [*KEYS, *arrows]))
    write_csv(paths["csv"], [_csv_row(r, columns) for r in rows], csv_columns(columns))
    write_csv(paths["scores"], judgement.scores, ["model", "method", "layer", "image", *columns])
    _figure(paths["figure"], rows, columns)
    write_text_atomic(paths["disagreement"], disagreement_text(rows, columns))
    return paths
