"""Reporting results: tables over seeds, Pareto fronts and plots, result figures.

* :mod:`.tables` — ``mean ± std`` summaries, Markdown and CSV tables;
* :mod:`.pareto` — Pareto fronts and representative models per group, and their plots;
* :mod:`.figures` — further result figures (explanation similarity under shifts).

Every figure is saved through :func:`rightreasons.plotting.figure`.
"""

from .figures import plot_shift_curves
from .pareto import LABELS, OBJECTIVES, mark_fronts, plot_pareto
from .tables import cell, format_value, markdown_table, statistic, summarize, write_csv

__all__ = ["LABELS", "OBJECTIVES", "cell", "format_value", "mark_fronts", "markdown_table", "plot_pareto",
           "plot_shift_curves", "statistic", "summarize", "write_csv"]
