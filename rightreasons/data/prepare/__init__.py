"""Checking real dataset downloads and building what is derived from them (``rightreasons prepare``).

* :mod:`.voc` — PASCAL VOC 2007: layout, annotation files, split lists, optional tar checksums;
* :mod:`.coco` — MS COCO 2014: instances files, images, optional checksums;
* :mod:`.waterbirds` — Waterbirds-100: ``metadata.csv``, images, and the bird box file built from the CUB masks;
* :mod:`.config` — the dataset a training config names (one's own ``coco-json`` data, a registered dataset).

Each ``check(...)`` returns a :class:`~.checks.Report` that prints exactly what is missing or wrong.
"""

from .checks import Report

__all__ = ["Report"]
