"""The classification loss of every task: BCE (the B-cos recipe) or softmax cross-entropy.

Targets are multi-hot ``[N, K]`` (the data package's sample format; single-label tasks are one-hot):

* ``bce``: binary cross-entropy on the logits — the B-cos recipe, for single- and multi-label tasks; with
  ``uniform_off_labels`` the off-targets are raised to ``1/K`` (the B-cos v2 release's uniform off-labels);
* ``ce``: softmax cross-entropy against the single positive class (standard models on single-label tasks);
* ``auto`` (:func:`resolve_classification_loss`) picks ``bce`` for B-cos models and multi-label data, ``ce``
  otherwise.

The probabilities a model assigns follow from the loss it was trained with (:func:`class_probabilities`): ``bce``
trains one sigmoid per class, ``ce`` one softmax over the classes.
"""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor

from ..errors import ConfigError

__all__ = ["CLASSIFICATION_LOSSES", "ClassificationLossName", "class_probabilities", "classification_loss",
           "resolve_classification_loss"]

CLASSIFICATION_LOSSES: tuple[str, ...] = ("auto", "bce", "ce")
ClassificationLossName = Literal[CLASSIFICATION_LOSSES]  # type: ignore[valid-type]
"""The type of a config field naming the classification loss."""


def resolve_classification_loss(kind: str, bcos: bool, multilabel: bool) -> Literal["bce", "ce"]:
    """The concrete loss for ``auto``; ``ce`` on multi-label data is refused."""
    if kind == "auto":
        return "bce" if bcos or multilabel else "ce"
    if kind == "ce" and multilabel:
        raise ConfigError("loss.classification='ce' needs single-label data; use 'bce' for multi-label datasets")
    if kind not in CLASSIFICATION_LOSSES:
        raise ConfigError(f"unknown classification loss {kind!r}; expected one of {list(CLASSIFICATION_LOSSES)}")
    return kind  # type: ignore[return-value]


def classification_loss(logits: Tensor, labels: Tensor, kind: Literal["bce", "ce"],
                        uniform_off_labels: bool = False, per_sample: bool = False) -> Tensor:
    """Mean classification loss of ``logits [N, K]`` against multi-hot ``labels [N, K]``, or with ``per_sample``
    each sample's loss ``[N]`` (BCE: the mean over its classes), whose mean is the mean loss."""
    if logits.shape != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} must have the same shape")
    if kind == "ce":
        return F.cross_entropy(logits, labels.argmax(1), reduction="none" if per_sample else "mean")
    target = labels.to(logits.dtype)
    if uniform_off_labels:
        target = target.clamp(min=1.0 / logits.shape[1])
    if per_sample:
        return F.binary_cross_entropy_with_logits(logits, target, reduction="none").mean(1)
    return F.binary_cross_entropy_with_logits(logits, target)


def class_probabilities(logits: Tensor, kind: Literal["bce", "ce"]) -> Tensor:
    """Class probabilities ``[N, K]`` of ``logits [N, K]`` through the link of the loss the model was trained with:
    ``sigmoid`` per class for ``bce`` (they need not sum to 1), ``softmax`` over the classes for ``ce``."""
    if kind == "bce":
        return logits.detach().float().sigmoid()
    if kind == "ce":
        return logits.detach().float().softmax(-1)
    raise ConfigError(f"unknown classification loss {kind!r}; expected 'bce' or 'ce' (resolve 'auto' first)")
