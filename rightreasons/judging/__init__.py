"""Judging explanations (``rightreasons judge``): models × explanation methods and layers, scored on the same images
by the explanation-quality metrics of :mod:`rightreasons.metrics` (docs/metrics.md), summarised as a table (mean
and 95 % bootstrap interval per metric) and a figure.

* :mod:`.suite` — the metrics by name (:data:`SUITE`; cheap ones by default, costly ones opt-in);
* :mod:`.constructed` — the opt-in metrics that build inputs from a batch: ROAD, IROF, the grid pointing game;
* :mod:`.judge` — :func:`judge`, per-image scores of every model, method and layer, batched on the device;
* :mod:`.intervals` — the percentile bootstrap over images;
* :mod:`.disagreement` — rank correlations between the metrics across the rows, and the pairs in conflict;
* :mod:`.report` — :func:`write_report`: ``table.md``, ``table.csv``, ``scores.csv``, ``figure.png``,
  ``disagreement.md``.
"""

from .disagreement import conflicts, rank_correlations
from .intervals import Interval, bootstrap_interval
from .judge import JudgedModel, Judgement, explanations, judge
from .report import FILES, disagreement_text, write_report
from .suite import DEFAULT_METRICS, SUITE, parse_metrics

__all__ = ["DEFAULT_METRICS", "FILES", "Interval", "JudgedModel", "Judgement", "SUITE", "bootstrap_interval",
           "conflicts", "disagreement_text", "explanations", "judge", "parse_metrics", "rank_correlations",
           "write_report"]
