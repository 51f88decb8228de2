"""Tables of results: summary statistics over seeds, Markdown and CSV.

:func:`statistic` is the one ``mean ± std`` of results over seeds and :func:`summarize` takes it per model and metric;
:func:`cell` formats one as a table cell,
:func:`markdown_table` and :func:`write_csv` write rows. The demo, the studies and the sweep report through these.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..fileio import write_csv_atomic

__all__ = ["cell", "format_value", "markdown_table", "statistic", "summarize", "write_csv"]


def statistic(values: Sequence[float]) -> dict[str, Any]:
    """The mean and sample std (``None`` for one value) of ``values`` (one per seed), and the values."""
    values = list(values)
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else None,
            "values": values}


def summarize(runs: Sequence[Mapping[str, Mapping[str, float]]], models: Sequence[str],
              metrics: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per model and metric over runs (seeds), from ``runs[i][model][metric]``: the values, their mean and sample
    std (``None`` for one run)."""
    out: dict[str, dict[str, Any]] = {}
    for model in models:
        out[model] = {}
        for key in metrics:
            out[model][key] = statistic([run[model][key] for run in runs])
    return out


def cell(stat: Mapping[str, Any], signed: bool = False) -> str:
    """A summary statistic of fractions as a table cell in % (or, for differences, percentage points with their sign,
    ``signed``): ``mean ± std`` (the mean alone for one run)."""
    mean = f"{100 * stat['mean']:+.1f}" if signed else f"{100 * stat['mean']:.1f}"
    return mean if stat["std"] is None else f"{mean} ± {100 * stat['std']:.1f}"


def format_value(value: Any, digits: int = 4) -> str:
    """A table cell: floats rounded to ``digits`` significant decimals, booleans as ✓ / blank, None as blank."""
    if isinstance(value, bool):
        return "✓" if value else ""
    if isinstance(value, float):
        return f"{value:.{digits}g}" if math.isfinite(value) else str(value)
    return "" if value is None else str(value)


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str],
                   headers: Sequence[str] | None = None) -> str:
    """A GitHub-flavoured Markdown table of ``rows`` (missing cells blank); ``|`` in cells is escaped."""
    headers = list(headers or columns)
    if len(headers) != len(columns):
        raise ValueError(f"markdown_table: {len(headers)} headers for {len(columns)} columns")
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        cells = [format_value(row.get(c)).replace("|", "\\|") for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_csv(path: str | Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> Path:
    """Write ``rows`` (only ``columns``, missing cells empty) as CSV with a header line, atomically."""
    return write_csv_atomic(path, columns, ([row.get(c, "") for c in columns] for row in rows))
