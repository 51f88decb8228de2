"""Check the dataset a training config names, whatever it is (``coco-json``, ``folder``, a registered one...), as
training reads it.

    rightreasons prepare config --config FILE [KEY=VALUE ...] [--workers N]

Builds the training and validation splits of the config's ``data`` section with their options (``data.options``
with ``data.split_options``; the test split: ``data.val_split=test``), reads every image as training does
(:func:`~.checks.check_split`) and checks that the splits share no image; prints what is missing or wrong.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import load_dataset
from .checks import Report, check_disjoint, check_split


def check(name: str, root: str | os.PathLike | None, splits: Sequence[str],
          options: Callable[[str], Mapping[str, Any]], workers: int = 0) -> Report:
    """Check ``splits`` of dataset ``name`` at ``root``, each built with ``options(split)`` (a config's ``data``
    section: :meth:`~rightreasons.engine.config.DataConfig.options_for`)."""
    report = Report(f"dataset {name} at {root}")
    checked: set[str] = set()
    loaded = []
    for split in dict.fromkeys(splits):
        dataset = check_split(report, split, lambda split=split: load_dataset(name, root, split, **options(split)),
                              checked, workers)
        loaded.append(dataset)
        if dataset is not None:
            report.note(f"{split}: {len(dataset)} images ({int((~dataset.records.labels.any(1)).sum())} without "
                        f"labels), {len(dataset.records.boxes)} boxes, {dataset.num_classes} classes")
    check_disjoint(report, loaded)
    return report
