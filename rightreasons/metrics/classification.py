"""Classification metrics: multi-label F1 / mAP (VOC, COCO) and single-label, per-group and worst-group accuracy
(Waterbirds), all accumulating across batches and processes.

Threshold convention for multi-label predictions: a class is predicted when ``sigmoid(logit) > 0.5``, i.e. when its
logit is positive (the Model-Guidance code thresholds logits at 0). :class:`MultiLabelClassification` takes raw
logits and applies the sigmoid itself, so torchmetrics never has to guess whether it was given logits.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import Tensor
from torchmetrics import MetricCollection
from torchmetrics.classification import MultilabelAveragePrecision, MultilabelF1Score
from torchmetrics.utilities import dim_zero_cat

from .base import GroupedRate, top1

__all__ = ["GroupAccuracy", "MeanAveragePrecision", "MultiLabelClassification", "group_accuracy"]


class MeanAveragePrecision(MultilabelAveragePrecision):
    """Macro average precision over the classes with at least one positive label.

    torchmetrics' macro mean gives a class without positives AP 0 (and warns at every call), which lowers the mean on
    any split that lacks a class — common on small or filtered data. Such a class is left out here instead (the
    convention of scikit-learn's and the VOC/COCO evaluation tools' per-class means); NaN when no class has a positive.
    """

    def __init__(self, num_classes: int, **kwargs) -> None:
        super().__init__(num_classes, average=None, **kwargs)

    def compute(self) -> Tensor:  # type: ignore[override]
        with warnings.catch_warnings():  # the classes it warns about are dropped below
            warnings.filterwarnings("ignore", "No positive samples found in target", UserWarning)
            per_class = super().compute()
        present = (dim_zero_cat(self.target) == 1).any(0)
        return per_class[present].mean() if present.any() else per_class.new_tensor(float("nan"))


class MultiLabelClassification(MetricCollection):
    """Multi-label F1 (micro and per class) and mAP from logits, as one torchmetrics collection.

    ``update(logits [N, K], labels [N, K] multi-hot)``; ``compute()`` returns ``{"f1": micro F1, "f1_per_class": [K],
    "map": macro average precision}``. F1 uses ``sigmoid(logits) > threshold`` (default 0.5); AP is threshold-free.
    The macro mean runs over the classes with at least one positive label in the evaluated data: the AP of a class
    without positives is undefined (:class:`MeanAveragePrecision`).
    """

    def __init__(self, num_classes: int, threshold: float = 0.5, **kwargs) -> None:
        # the inputs are checked in _prepare, and the two F1 scores share their states (given, not found by comparing
        # states): torchmetrics' own checks and comparisons would read them on the host at every batch
        super().__init__({
            "f1": MultilabelF1Score(num_classes, threshold=threshold, average="micro", validate_args=False),
            "f1_per_class": MultilabelF1Score(num_classes, threshold=threshold, average=None, validate_args=False),
            "map": MeanAveragePrecision(num_classes, validate_args=False),
        }, compute_groups=[["f1", "f1_per_class"], ["map"]], **kwargs)
        self.num_classes = num_classes

    def _prepare(self, logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """Probabilities and integer labels; shapes checked against ``num_classes``."""
        expected = (logits.shape[0], self.num_classes)
        if logits.dim() != 2 or tuple(logits.shape) != expected or not logits.is_floating_point():
            raise ValueError(f"MultiLabelClassification: logits must be float [N, {self.num_classes}], "
                             f"got dtype {logits.dtype} and shape {tuple(logits.shape)}")
        if tuple(labels.shape) != tuple(logits.shape):
            raise ValueError(f"MultiLabelClassification: labels must be multi-hot of shape {tuple(logits.shape)}, "
                             f"got shape {tuple(labels.shape)}")
        return torch.sigmoid(logits.detach()), labels.detach().long()

    def update(self, logits: Tensor, labels: Tensor) -> None:  # type: ignore[override]
        """Accumulate a batch of logits ``[N, K]`` and multi-hot labels ``[N, K]``."""
        super().update(*self._prepare(logits, labels))

    def forward(self, logits: Tensor, labels: Tensor) -> dict[str, Tensor]:  # type: ignore[override]
        """Accumulate a batch and return the metrics of that batch alone."""
        return super().forward(*self._prepare(logits, labels))


class GroupAccuracy(GroupedRate):
    """Top-1 accuracy overall, per group and in the worst group (e.g. the four Waterbirds groups).

    ``update(preds, target, groups=None)`` with ``preds`` scores ``[N, K]`` (argmax) or classes ``[N]``,
    ``target [N]`` classes and ``groups [N]`` group ids (all 0 when omitted). ``compute()`` returns
    ``accuracy``, ``worst_group_accuracy``, ``worst_group`` and ``accuracy/<group name>`` per group seen.
    """

    rate_name = "accuracy"

    def update(self, preds: Tensor, target: Tensor, groups: Tensor | None = None) -> None:
        predicted = top1(preds.detach(), "GroupAccuracy.update", "preds")
        target = torch.as_tensor(target, device=predicted.device)
        if target.shape != predicted.shape or target.is_floating_point():
            raise ValueError(f"GroupAccuracy.update: target must be integer classes of shape "
                             f"{tuple(predicted.shape)}, got dtype {target.dtype} and shape {tuple(target.shape)}")
        self._add(predicted == target, groups)


def group_accuracy(preds: Tensor, target: Tensor, groups: Tensor | None = None, num_groups: int = 1,
                   group_names: Sequence[str] | None = None) -> dict[str, Tensor]:
    """One-shot :class:`GroupAccuracy` on single tensors: the same dict of overall/per-group/worst-group accuracy."""
    metric = GroupAccuracy(num_groups, group_names).to(preds.device)
    metric.update(preds, target, groups)
    return metric.compute()
