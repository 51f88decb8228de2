"""Localisation metrics of attribution maps against masks: EPG, IoU and the on-object ratio.

Every function scores one (image, class) pair per row: ``attributions [N, H, W]`` for the class and ``masks [N, H, W]``
(bool or 0/1, e.g. the union of the class's boxes, :func:`rightreasons.boxes.boxes_to_masks`). Only the positive part
``A⁺`` of an attribution counts as evidence for the class.

:func:`energy_ratio` is the one kernel of every "share of positive evidence inside a region" score: EPG, the Energy
loss of model guidance (``1 − EPG``, :func:`rightreasons.guidance.energy_loss`), the on-object ratio and the grid
pointing game. Its degenerate case is defined there, once. IoU's is: an empty union scores 0. Scores are always finite.
The accumulating metrics average over all pairs given to ``update`` on all processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from .base import PerSampleMean, check_binary_mask, check_maps

__all__ = ["DEFAULT_IOU_CANDIDATES", "ENERGY_EPS", "EnergyPointingGame", "IoU", "OnObjectRatio", "energy_ratio", "epg",
           "iou", "normalize_attributions", "on_object_ratio", "select_iou_threshold"]

Normalization = Literal["max", "minmax"]

#: Thresholds tried by :func:`select_iou_threshold` unless told otherwise: 0.00, 0.05, ..., 0.95.
DEFAULT_IOU_CANDIDATES: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(20))


ENERGY_EPS = 1e-7
"""The Energy loss's floor of positive evidence: below it a map counts as holding none (:func:`energy_ratio`)."""


def energy_ratio(attributions: Tensor, inside: Tensor, within: Tensor | None = None, eps: float = 0.0) -> Tensor:
    """The share of positive evidence inside a region, per row ``[N]``: ``Σ inside·within·A⁺ / Σ within·A⁺``
    (``within`` = everywhere when ``None``).

    Degenerate case: a map whose positive evidence ``Σ within·A⁺`` is 0 — or below ``eps`` — holds none, and its
    ratio is replaced by its numerator ``Σ inside·within·A⁺`` (0, or below ``eps``): a map without positive evidence
    has localised nothing. The metrics keep ``eps = 0``, so that a score does not depend on the map's overall scale
    (a freshly B-cosified model's contributions of 1e-9 score as the same maps ×10⁶ do). The Energy loss passes
    :data:`ENERGY_EPS`, the Model-Guidance release's rule: where ``Σ A⁺`` is tiny the ratio's gradient grows as
    ``1 / Σ A⁺``, the numerator's stays ``inside``. Either way the value and its gradients are finite.

    ``inside`` and ``within`` are bool (or 0/1) ``[N, H, W]``; the result keeps the autograd graph of
    ``attributions`` (the Energy loss back-propagates through it).
    """
    positive = attributions.clamp(min=0)
    if within is not None:
        positive = positive * within
    total = positive.flatten(1).sum(1)
    captured = (positive * inside).flatten(1).sum(1)
    return captured / torch.where(total <= eps, torch.ones_like(total), total)


def epg(attributions: Tensor, masks: Tensor, void: Tensor | None = None) -> Tensor:
    """Energy pointing game ``EPG = Σ M·A⁺ / Σ V·A⁺`` per pair ``[N]``, in ``[0, 1]`` and independent of the map's
    scale (:func:`energy_ratio`; 0 for a map without positive evidence).

    Args:
        attributions: ``[N, H, W]`` attribution maps (any sign).
        masks: ``[N, H, W]`` bool or 0/1 masks (the union of the class's boxes). An empty mask scores 0.
        void: optional ``[N, H, W]`` bool pixels that count neither inside nor outside (a segmentation's void,
            :func:`rightreasons.regions.region_masks`); ``V`` is the other pixels (all when ``None``).
    """
    check_maps("epg", attributions=attributions, masks=masks, **_void_maps(void))
    mask = check_binary_mask("epg", "masks", masks)
    return energy_ratio(attributions, mask, None if void is None else ~check_binary_mask("epg", "void", void))


def _void_maps(void: Tensor | None) -> dict[str, Tensor]:
    """``{"void": void}`` for :func:`check_maps`, nothing when there is no void."""
    return {} if void is None else {"void": void}


def normalize_attributions(attributions: Tensor, normalize: Normalization = "minmax") -> Tensor:
    """Scale the positive part of each map ``[N, H, W]`` to ``[0, 1]`` before thresholding.

    * ``"max"``: ``A⁺ / max A⁺`` (the e²KD paper's IoU uses threshold 0.05 on such maps);
    * ``"minmax"``: ``(A⁺ − min A⁺) / (max A⁺ − min A⁺)`` (the Model-Guidance code, threshold 0.5).

    A map with no positive value stays all zero; a constant positive map becomes all ones under both schemes
    (every pixel is equally important).
    """
    if normalize not in ("max", "minmax"):
        raise ValueError(f"normalize must be 'max' or 'minmax', got {normalize!r}")
    positive = attributions.clamp(min=0).flatten(1)
    high = positive.amax(1, keepdim=True)
    low = positive.amin(1, keepdim=True) if normalize == "minmax" else torch.zeros_like(high)
    span = high - low
    constant = span == 0
    scaled = torch.where(constant, (high > 0).to(positive.dtype).expand_as(positive),
                         (positive - low) / torch.where(constant, torch.ones_like(span), span))
    return scaled.view_as(attributions)


def _as_thresholds(threshold: float | Sequence[float] | Tensor) -> tuple[Tensor, bool]:
    """Thresholds as a 1-D float tensor and whether a single scalar was given."""
    t = torch.as_tensor(threshold, dtype=torch.float64)
    if t.dim() > 1 or t.numel() == 0:
        raise ValueError(f"threshold must be a number or a non-empty 1-D sequence, got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"threshold must be finite, got {t.tolist()}")
    return t.reshape(-1), t.dim() == 0


def iou(attributions: Tensor, masks: Tensor, threshold: float | Sequence[float] | Tensor = 0.5,
        normalize: Normalization = "minmax", void: Tensor | None = None) -> Tensor:
    """IoU of the binarised attribution with the mask, per pair.

    Each map is normalised with :func:`normalize_attributions` and binarised as ``normalised > threshold``; the
    score is ``|B ∧ M| / |B ∨ M|``, 0 when the union is empty. Pixels of the optional ``void [N, H, W]`` bool are
    left out of both counts, as VOC's segmentation evaluation leaves out its void pixels (the map is still normalised
    over the whole image: the void changes what is counted, not the binarised map). ``threshold`` may be one number
    (result ``[N]``) or ``T`` candidates (result ``[N, T]``, used by :func:`select_iou_threshold`). The thesis picks
    the threshold on a held-out split; the Model-Guidance code used 0.5 with ``"minmax"``, the e²KD paper 0.05 with
    ``"max"``.
    """
    check_maps("iou", attributions=attributions, masks=masks, **_void_maps(void))
    mask = check_binary_mask("iou", "masks", masks).flatten(1)
    counted = None if void is None else ~check_binary_mask("iou", "void", void).flatten(1)
    if counted is not None:
        mask = mask & counted
    thresholds, scalar = _as_thresholds(threshold)
    scaled = normalize_attributions(attributions.detach(), normalize).flatten(1)
    area = mask.sum(1)
    scores = []
    for t in thresholds.tolist():
        binary = scaled > t if counted is None else (scaled > t) & counted
        intersection = (binary & mask).sum(1)
        union = binary.sum(1) + area - intersection
        scores.append(intersection.to(scaled.dtype) / union.clamp(min=1))  # an empty union has no intersection: 0
    out = torch.stack(scores, 1)
    return out[:, 0] if scalar else out


def select_iou_threshold(attributions: Tensor, masks: Tensor,
                         candidates: Sequence[float] | Tensor = DEFAULT_IOU_CANDIDATES,
                         normalize: Normalization = "minmax") -> tuple[float, Tensor]:
    """Pick the IoU threshold with the highest mean IoU on a held-out split.

    Returns ``(best threshold, mean IoU per candidate [T])``; ties go to the candidate listed first. For a split too large to hold in memory, accumulate ``IoU(threshold=candidates)`` over batches and
    take ``candidates[metric.compute().argmax()]`` — the same rule.
    """
    thresholds, _ = _as_thresholds(candidates)
    means = iou(attributions, masks, thresholds, normalize).mean(0)
    return float(thresholds[int(means.argmax())]), means


def on_object_ratio(attributions: Tensor, object_masks: Tensor, box_masks: Tensor) -> Tensor:
    """On-object EPG per pair ``[N]``: positive energy inside the segmentation mask *and* the box over the positive
    energy inside the box (thesis app. D.2.4); 0 when the box holds no positive energy (:func:`energy_ratio`).

    Unlike EPG it ignores attributions outside the box and asks how much of the in-box evidence lies on the object.
    """
    check_maps("on_object_ratio", attributions=attributions, object_masks=object_masks, box_masks=box_masks)
    obj = check_binary_mask("on_object_ratio", "object_masks", object_masks)
    box = check_binary_mask("on_object_ratio", "box_masks", box_masks)
    return energy_ratio(attributions, obj, box)


class EnergyPointingGame(PerSampleMean):
    """Mean :func:`epg` over every (image, class) pair passed to ``update(attributions [N,H,W], masks [N,H,W])``
    (and optionally ``void [N,H,W]``)."""

    def score(self, attributions: Tensor, masks: Tensor, void: Tensor | None = None) -> Tensor:
        return epg(attributions, masks, void)


class IoU(PerSampleMean):
    """Mean :func:`iou` over every pair passed to ``update(attributions [N,H,W], masks [N,H,W])`` (and optionally
    ``void [N,H,W]``).

    Args:
        threshold: one threshold (``compute()`` is a scalar) or ``T`` candidates (``compute()`` is ``[T]``, e.g. to
            select the threshold on a held-out split). Default 0.5 with ``"minmax"``: the Model-Guidance code.
        normalize: ``"max"`` or ``"minmax"``, see :func:`normalize_attributions`.
    """

    def __init__(self, threshold: float | Sequence[float] | Tensor = 0.5, normalize: Normalization = "minmax",
                 **kwargs) -> None:
        thresholds, scalar = _as_thresholds(threshold)
        if normalize not in ("max", "minmax"):
            raise ValueError(f"IoU: normalize must be 'max' or 'minmax', got {normalize!r}")
        super().__init__(score_shape=() if scalar else (len(thresholds),), **kwargs)
        self.threshold = float(thresholds[0]) if scalar else thresholds
        self.normalize = normalize

    def score(self, attributions: Tensor, masks: Tensor, void: Tensor | None = None) -> Tensor:
        return iou(attributions, masks, self.threshold, self.normalize, void)


class OnObjectRatio(PerSampleMean):
    """Mean :func:`on_object_ratio` over pairs passed to ``update(attributions, object_masks, box_masks)``."""

    def score(self, attributions: Tensor, object_masks: Tensor, box_masks: Tensor) -> Tensor:
        return on_object_ratio(attributions, object_masks, box_masks)
