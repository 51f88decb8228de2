"""The explanation viewer (``rightreasons view``): one static HTML page comparing trained runs image by image.

* :mod:`.runs` — :class:`ViewedRun`, labels, the one-dataset check, the method each run is shown with, its metrics;
* :mod:`.records` — per image, each run's prediction, explanation picture and EPG;
* :mod:`.pictures` — tensors → PNG data URIs (the project's colour explanation for B-cos weights);
* :mod:`.view` — :func:`collect_view`, everything the page shows as one JSON-able mapping;
* :mod:`.page` — :func:`render_page`, the self-contained HTML (filters and sorting in its script).
"""

from .page import render_page
from .runs import ViewedRun, run_labels
from .view import collect_view

__all__ = ["ViewedRun", "collect_view", "render_page", "run_labels"]
