"""The data of one page: the runs, their metrics and every image's records, as one JSON-able mapping."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..errors import UsageError
from ..models import capabilities
from ..regions import require_regions
from .records import image_records, run_records, viewed_samples
from .runs import ViewedRun, check_same_dataset, summary_results, viewed_method

__all__ = ["collect_view"]


def collect_view(runs: Sequence[ViewedRun], split: str, count: int, method: str | None = None,
                 layer: str | None = None, device: torch.device | str = "cpu", regions: str = "boxes"
                 ) -> dict[str, Any]:
    """What the page shows of ``runs`` (one dataset: :func:`~rightreasons.viewer.runs.check_same_dataset`) on the first
    ``count`` images of ``split``: ``dataset``, ``split``, ``regions``, ``classes``, ``groups`` (names or ``None``), per
    run its ``label``, ``path``, ``method``, ``layer`` and ``metrics``
    (:func:`~rightreasons.viewer.runs.summary_results`), and per image its shared record
    (:func:`~rightreasons.viewer.records.image_records`) with ``runs``, one record per run
    (:func:`~rightreasons.viewer.records.run_records`, EPG against ``regions``, boxes by default, for every run alike).
    ``method`` / ``layer`` override each run's own."""
    require_regions(regions, "--regions")
    check_same_dataset(runs)
    shown, images = [], None
    for run in runs:
        samples, dataset = viewed_samples(run, split, count)
        ids = [str(s["id"]) for s in samples]
        if images is None:
            images = image_records(samples, capabilities(run.model).encoding)
            for record in images:
                record["runs"] = []
        elif ids != [record["id"] for record in images]:
            raise UsageError(f"RUN_DIR {run.path} sees other images in split {split!r} than {runs[0].path} (the data "
                             "changed between the runs?); view compares the same images")
        run_method, run_layer = viewed_method(run.config, capabilities(run.model).bcos, method, layer)
        for record, run_record in zip(images, run_records(run, samples, dataset, run_method, run_layer,
                                                          device=device, regions=regions)):
            record["runs"].append(run_record)
        shown.append({"label": run.label, "path": str(run.path), "method": run_method, "layer": run_layer,
                      "metrics": summary_results(run.summary)})
    return {"dataset": runs[0].config.data.name, "split": split, "regions": regions,
            "classes": list(dataset.classes),
            "groups": None if dataset.group_names is None else list(dataset.group_names), "runs": shown,
            "images": images}
