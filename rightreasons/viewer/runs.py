"""The runs a page compares: what each one is (:class:`ViewedRun`), the labels that tell them apart, the dataset they
must share, the explanation method each is shown with, and the numbers of its ``summary.json``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torch import nn

from ..classification import ClassificationConfig
from ..errors import UsageError
from ..explain import get_method, layer_for
from ..models.model_card import run_evaluations

__all__ = ["ViewedRun", "check_same_dataset", "run_labels", "summary_results", "viewed_method"]

HIDDEN_RESULTS = {"step", "epoch", "split", "score", "score_metric"}
"""Summary entries that are bookkeeping, not results: not shown among a run's metrics."""


@dataclass(frozen=True)
class ViewedRun:
    """One run of the page: its ``label`` (unique on the page), the ``path`` given, the trained ``model`` and the
    ``config`` it was trained with, and its ``summary`` (``summary.json``; empty for a checkpoint of an unfinished
    run)."""

    label: str
    path: Path
    model: nn.Module
    config: ClassificationConfig
    summary: Mapping[str, Any]


def run_labels(paths: Sequence[Path]) -> list[str]:
    """Short unique labels for run ``paths``: the last path component, or as many trailing components as it takes
    to tell them apart (``a/run``, ``b/run``); the whole path where even that does not."""
    parts = [Path(p).resolve().parts for p in paths]
    for depth in range(1, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [str(p) for p in paths]


def _dataset(config: ClassificationConfig) -> tuple[Any, ...]:
    """What names a run's data: the dataset, its folder (resolved: ``data/wb`` and ``./data/wb`` are one) and its
    options (with each split's own)."""
    data = config.data
    return data.name, data.root and Path(data.root).resolve(), data.options, data.split_options


def _describe(config: ClassificationConfig) -> str:
    name, root, options, split = config.data.name, config.data.root, config.data.options, config.data.split_options
    return (name + (f" at {root}" if root else "") + (f" with options {dict(options)}" if options else "")
            + (f" and split options {dict(split)}" if split else ""))


def check_same_dataset(runs: Sequence[ViewedRun]) -> None:
    """Refuse runs trained on different data (name, root and options) with a
    :class:`~rightreasons.errors.UsageError` naming both datasets: the page shows the same images for every run."""
    first = runs[0]
    for run in runs[1:]:
        if _dataset(run.config) != _dataset(first.config):
            raise UsageError(f"RUN_DIR {first.path} was trained on {_describe(first.config)} but {run.path} on "
                             f"{_describe(run.config)}; view compares runs on one dataset")


def viewed_method(config: ClassificationConfig, bcos: bool, method: str | None = None,
                  layer: str | None = None) -> tuple[str, str]:
    """The attribution method and layer a run is shown with: ``method`` / ``layer`` where given (a method without a
    layer at its default layer), else those the run's config scores localisation with
    (:meth:`~rightreasons.classification.ClassificationConfig.localization`; B-cos contributions for B-cos models),
    whether or not its validation did."""
    if method is None:
        method, configured = replace(config, eval=replace(config.eval, localization=True)).localization(bcos)
        layer = layer or configured
    return method, layer_for(method, layer or get_method(method).default_layer)


def summary_results(summary: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Evaluation → its scalar results (numbers and names, e.g. ``worst_group``) in a run's ``summary``
    (:func:`~rightreasons.models.model_card.run_evaluations`)."""
    return {name: {k: v for k, v in values.items()
                   if k not in HIDDEN_RESULTS and isinstance(v, (int, float, str)) and not isinstance(v, bool)}
            for name, values in run_evaluations(summary).items()}