"""One evaluation loop for every task: :func:`evaluate` runs a model over a dataset and lets evaluators score it;
:func:`score_model` is the one way to score a trained model (or its file) on a dataset.

An evaluator (:class:`Evaluator`) sees every batch — moved to the device, with the model's logits computed once by the
loop — and accumulates what it measures; :meth:`Evaluator.compute` returns plain numbers. The library's evaluators:

* :class:`ClassificationEvaluator` — accuracy, per-group and worst-group accuracy (single-label data) or micro F1,
  per-class F1 and mAP (multi-label data), and the selection ``score`` (accuracy or F1, named in ``score_metric``);
* :class:`LocalizationEvaluator` — EPG and IoU of an attribution method at a layer, over every ground-truth class of
  every image with boxes (:mod:`rightreasons.metrics.localization_pairs`);
* distillation adds :class:`rightreasons.distill.fidelity.FidelityEvaluator` (agreement with the teacher,
  explanation similarity).

A model whose logits are not finite (NaN or ±inf) is refused with a :class:`~rightreasons.errors.NonFiniteError` naming
the model (its file, when scored from one) and the images (:func:`require_finite_logits`), and so is a metric that
comes out non-finite: a score must never be written as ``NaN``, or pass as a number it is not.

Each process scores its own shard of the dataset (:func:`shard_indices`: every index exactly once, no padding) and the
torchmetrics states are summed across processes, so a multi-process evaluation equals a single-process one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Subset

from ..data import collate, transforms_for
from ..errors import NonFiniteError
from ..models import load_model
from ..models.preprocessing import recorded_crop
from ..regions import POINT_RADIUS, require_regions
from .attribution_fn import attribution_fn
from .classification import GroupAccuracy, MultiLabelClassification
from .localization import EnergyPointingGame, IoU
from .localization_pairs import Regions, evaluate_localization

__all__ = ["ClassificationEvaluator", "Evaluator", "LocalizationEvaluator", "classifier_evaluators", "evaluate",
           "format_results", "has_boxes", "is_multilabel", "plain_numbers", "require_finite_logits", "result_names",
           "score_model", "shard_indices"]


class Evaluator(Protocol):
    """Accumulates one family of metrics over the batches of an evaluation."""

    def update(self, model: nn.Module, batch: dict[str, Any], logits: Tensor) -> None:
        """Score a batch (tensors on the evaluation device); ``logits [N, K]`` are the model's, already computed."""

    def compute(self) -> dict[str, Any]:
        """The metrics over every batch seen on every process, as Python numbers (lists for per-class values)."""


def result_names(evaluators: Sequence[Evaluator]) -> set[str] | None:
    """Every key the ``evaluators``' :meth:`~Evaluator.compute` may return, known before any batch (so that a run can
    refuse to select a metric that validation never reports before it trains); ``None`` when an evaluator does not
    say (one without a ``result_names()`` method)."""
    names: set[str] = set()
    for evaluator in evaluators:
        listed = getattr(evaluator, "result_names", None)
        if listed is None:
            return None
        names.update(listed())
    return names


def shard_indices(n: int, rank: int, world_size: int) -> list[int]:
    """Indices ``rank, rank + world_size, …`` of ``range(n)``: every index on exactly one process."""
    return list(range(rank, n, world_size))


def is_multilabel(dataset: Any) -> bool:
    """Whether any sample of the dataset has more than one positive label."""
    return bool(dataset.positive_labels.sum(1).max() > 1)


def has_boxes(dataset: Any) -> bool:
    """Whether any image of ``dataset`` carries boxes: EPG and IoU need them (Waterbirds loaded with
    ``data.options.box_file=null`` has none)."""
    return bool(dataset.annotated.any())


def format_results(results: dict[str, Any]) -> str:
    """Evaluation results as one line for the console, every metric by name: numbers with four decimals, names
    as they are, per-class lists and mappings by their length (they are in ``metrics.jsonl``); ``score`` names its
    metric."""
    parts = []
    for key in sorted(results, key=lambda k: k != "score"):  # the score first, the rest in their order
        value = results[key]
        if key == "score_metric":
            continue
        if isinstance(value, float):
            text = f"{value:.4f}"
        elif isinstance(value, (list, tuple, dict)):
            text = f"[{len(value)} values]"
        else:
            text = str(value)
        if key == "score" and "score_metric" in results:
            text += f" ({results['score_metric']})"
        parts.append(f"{key}={text}")
    return ", ".join(parts)


def plain_numbers(results: dict[str, Tensor], prefix: str = "") -> dict[str, Any]:
    """A metric's results as Python numbers (scalars) and lists (vectors), keys prefixed."""
    out = {}
    for key, value in results.items():
        value = value.detach().cpu()
        out[f"{prefix}{key}"] = value.item() if value.numel() == 1 else value.tolist()
    return out


class ClassificationEvaluator:
    """Accuracy (overall, per group, worst group) on single-label data; micro F1, per-class F1 and mAP on
    multi-label data. ``score`` is the accuracy or the F1: the number model selection maximises; ``score_metric``
    says which. ``worst_group`` is the worst group's name (grouped data only); ``f1_per_class`` maps class names to
    F1 when the classes are named, else lists it by class index.

    Args:
        num_classes: the model's classes.
        multilabel: score multi-label (F1/mAP) instead of top-1 accuracy.
        group_names: names of the dataset's groups (``batch["group"]``) for per-group accuracy, or ``None``.
        class_names: names of the ``num_classes`` classes, or ``None``.
    """

    def __init__(self, num_classes: int, multilabel: bool, group_names: Sequence[str] | None = None,
                 class_names: Sequence[str] | None = None) -> None:
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"ClassificationEvaluator: {len(class_names)} class names for {num_classes} classes")
        self.class_names = None if class_names is None else [str(c) for c in class_names]
        self.multilabel = multilabel
        self.grouped = bool(group_names) and not multilabel
        self.metric = MultiLabelClassification(num_classes) if multilabel else \
            GroupAccuracy(len(group_names) if self.grouped else 1, list(group_names) if self.grouped else None)

    @classmethod
    def for_dataset(cls, dataset: Any) -> ClassificationEvaluator:
        """The evaluator that fits ``dataset`` (its classes, whether it is multi-label, its groups)."""
        return cls(dataset.num_classes, is_multilabel(dataset), dataset.group_names, getattr(dataset, "classes", None))

    def update(self, model: nn.Module, batch: dict[str, Any], logits: Tensor) -> None:
        self.metric.to(logits.device, non_blocking=True)  # a blocking copy would wait for the device
        if self.multilabel:
            self.metric.update(logits.float(), batch["labels"])
        else:
            groups = batch.get("host", batch)["group"] if self.grouped else None  # checked on the host
            self.metric.update(logits.float(), batch["labels"].argmax(1), groups)

    def result_names(self) -> list[str]:
        """Every key :meth:`compute` may return."""
        names = list(self.metric.keys()) if self.multilabel else self.metric.result_names()
        return [*names, "score_metric", "score"]

    def compute(self) -> dict[str, Any]:
        results = plain_numbers(self.metric.compute())
        if "worst_group" in results:  # grouped data: the worst group by name
            results["worst_group"] = self.metric.group_names[results["worst_group"]]
        if "f1_per_class" in results and self.class_names is not None:
            results["f1_per_class"] = dict(zip(self.class_names, results["f1_per_class"]))
        results["score_metric"] = "f1" if self.multilabel else "accuracy"
        results["score"] = results[results["score_metric"]]
        return results


class LocalizationEvaluator:
    """EPG and IoU of ``method`` at ``layer`` for every (image, ground-truth class) pair with a region.

    Args:
        method, layer: the attribution (:func:`rightreasons.explain.attribute`).
        iou_threshold: threshold of the min-max normalised map for IoU.
        batch_size: (image, class) pairs per attribution call.
        regions, point_radius: what a pair's region is made of (:mod:`rightreasons.regions`; default the boxes)
            from the batch's ``boxes``, ``mask``, ``points`` and ``point_labels``.

    :meth:`compute` returns ``{}`` when no image of the evaluated data (on any process) has boxes.
    """

    def __init__(self, method: str, layer: str, iou_threshold: float = 0.5, batch_size: int = 64,
                 regions: str = "boxes", point_radius: float = POINT_RADIUS) -> None:
        self.regions = Regions(require_regions(regions), point_radius=point_radius)
        self.explain = attribution_fn(method, layer)
        self.metrics = [EnergyPointingGame(), IoU(threshold=iou_threshold)]
        self.batch_size = batch_size
        self.pairs = 0

    def update(self, model: nn.Module, batch: dict[str, Any], logits: Tensor) -> None:
        for metric in self.metrics:
            metric.to(logits.device, non_blocking=True)
        host = batch.get("host", batch)  # which pairs, and their masks, are decided on the host
        regions = replace(self.regions, mask=host.get("mask"), points=host.get("points"),
                          point_labels=host.get("point_labels"))
        self.pairs += evaluate_localization(model, batch["image"], host["labels"], host["boxes"], host["box_labels"],
                                            self.explain, self.metrics, batch_size=self.batch_size, regions=regions)

    def result_names(self) -> list[str]:
        """Every key :meth:`compute` may return."""
        return ["epg", "iou"]

    def compute(self) -> dict[str, Any]:
        counted = torch.tensor(float(self.pairs), device=self.metrics[0].total.device)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(counted)
        if counted.item() == 0:
            return {}
        epg, iou = (plain_numbers({"value": m.compute()})["value"] for m in self.metrics)
        return {"epg": epg, "iou": iou}


def classifier_evaluators(dataset: Any, method: str | None = None, layer: str = "input", *,
                          iou_threshold: float = 0.5, batch_size: int = 64, regions: str = "boxes",
                          point_radius: float = POINT_RADIUS) -> list[Evaluator]:
    """The evaluators of a classifier on ``dataset``: classification, and localisation of ``method`` at ``layer``
    against ``regions`` unless ``method`` is ``None``."""
    evaluators: list[Evaluator] = [ClassificationEvaluator.for_dataset(dataset)]
    if method is not None:
        evaluators.append(LocalizationEvaluator(method, layer, iou_threshold, batch_size, regions, point_radius))
    return evaluators


def require_finite_logits(logits: Tensor, source: str, items: Sequence[str]) -> None:
    """Refuse ``logits [N, K]`` holding NaN or ±inf with a :class:`NonFiniteError` naming ``source`` (the model or its
    file) and the first of the ``items [N]`` (image ids or files) concerned."""
    bad = ~torch.isfinite(logits.detach()).all(dim=1)
    if bad.any():
        first = int(bad.nonzero()[0, 0])
        raise NonFiniteError(f"{source}: the model's outputs (logits) are not finite (NaN or ±inf) for "
                             f"{int(bad.sum())} of {len(bad)} image(s), the first {items[first]}; its weights are "
                             "probably not finite or overflow, so no metric or explanation of it means anything")


def _require_finite_results(results: dict[str, Any], source: str) -> None:
    """Refuse a metric that came out NaN or ±inf (e.g. EPG of non-finite attributions) naming it and ``source``."""
    for key, value in results.items():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise NonFiniteError(f"{source}: metric {key!r} is not finite ({value}); the model's explanations or "
                                 "outputs are probably not finite")


def _to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """The batch's tensors on ``device`` (asynchronously where the device can), and the loader's own batch under
    ``"host"``: what evaluators decide on the host (which image has boxes of which class) needs no device read."""
    moved = {key: value.to(device, non_blocking=True) if isinstance(value, Tensor) else value
             for key, value in batch.items()}
    return {**moved, "host": batch}


@torch.no_grad()
def evaluate(model: nn.Module, dataset: Dataset, evaluators: Sequence[Evaluator], *, batch_size: int,
             device: torch.device | str, rank: int = 0, world_size: int = 1, num_workers: int = 0,
             source: str = "the evaluated model") -> dict[str, Any]:
    """Run ``model`` (put in eval mode here; the caller restores train mode) over this process's shard of
    ``dataset`` and return the merged results of all ``evaluators`` (computed across processes). Non-finite logits
    or metrics are a :class:`NonFiniteError` naming ``source``. Nothing is read from the device until every batch
    has been scored: evaluators get each batch on the device with the loader's own under ``"host"``."""
    model.eval()
    device = torch.device(device)
    shard = Subset(dataset, shard_indices(len(dataset), rank, world_size))
    loader = DataLoader(shard, batch_size=batch_size, shuffle=False, collate_fn=collate, num_workers=num_workers)
    finite, ids = [], []
    for batch in loader:
        batch = _to_device(batch, device)
        logits = model(batch["image"])
        finite.append(torch.isfinite(logits.detach()).all(dim=1))  # read once, after the loop: no wait per batch
        ids += [f"id {i}" for i in batch["id"]]
        for evaluator in evaluators:
            evaluator.update(model, batch, logits)
    if finite and not torch.cat(finite).all():
        require_finite_logits(torch.where(torch.cat(finite)[:, None], 0.0, torch.nan), source, ids)
    results: dict[str, Any] = {}
    for evaluator in evaluators:
        results.update(evaluator.compute())
    _require_finite_results(results, source)
    return results


def score_model(model: nn.Module | str | Path, dataset: Any, *, image_size: int, method: str | None,
                layer: str = "input", iou_threshold: float = 0.5, extra: Sequence[Evaluator] = (),
                batch_size: int = 64, device: torch.device | str = "cpu", source: str | None = None,
                regions: str = "boxes", point_radius: float = POINT_RADIUS) -> dict[str, Any]:
    """Score a trained ``model`` (or a model file, :func:`rightreasons.load_model`) on ``dataset``: its samples get
    the model's evaluation transform at ``image_size`` (full image, no crop, unless the model records another
    ``crop_pct``: :mod:`rightreasons.models.preprocessing`); classification metrics, EPG and IoU of
    ``method`` at ``layer`` when ``method`` is set and ``dataset`` has boxes, and the metrics of the ``extra``
    evaluators (e.g. fidelity to a teacher), in one pass. EPG and IoU score against ``regions`` (a choice of
    :data:`rightreasons.regions.REGIONS`, points as discs of ``point_radius``; default the boxes). The results also
    say which method scored localisation (``method``: ``None`` when none did), at which ``layer``, against which
    ``regions``, on how many ``images``. ``source`` names the model in errors (default: its file, when ``model`` is
    one)."""
    source = source or (str(model) if isinstance(model, (str, Path)) else "the evaluated model")
    model = (load_model(model) if isinstance(model, (str, Path)) else model).to(device)
    dataset.transform = transforms_for(model, image_size, crop_fraction=recorded_crop(model))
    method = method if has_boxes(dataset) else None
    evaluators = [*classifier_evaluators(dataset, method, layer, iou_threshold=iou_threshold, batch_size=batch_size,
                                         regions=require_regions(regions), point_radius=point_radius), *extra]
    results = evaluate(model, dataset, evaluators, batch_size=batch_size, device=device, source=source)
    return {"images": len(dataset), "method": method, "layer": layer,
            **({"regions": regions} if method is not None else {}), **results}
