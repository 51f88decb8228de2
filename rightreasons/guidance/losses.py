"""Localisation losses of model guidance: Energy, L1, PPCE, RRR* (thesis §7.1.4, eqs. 7.3–7.6) and the size-corrected
Energy.

Every loss takes attribution maps ``[N, H, W]`` (one class per sample, at input resolution, signed as an attribution
method returns them) and binary masks ``[N, H, W]`` (that class's region: boxes, segmentation or points,
:mod:`rightreasons.regions`) and owns its preprocessing:

* ``A⁺ = max(A, 0)``, ``Â⁺ = A⁺ / max A⁺`` (0 where ``max A⁺ = 0``), ``Â = A / max|A|`` (0 where ``max|A| = 0``);
* ``energy``: ``1 − Σ M·A⁺ / Σ A⁺``, ``1 − EPG``: both are computed by one kernel,
  :func:`rightreasons.metrics.energy_ratio`, which also defines the case ``Σ A⁺ ≈ 0`` (below
  :data:`~rightreasons.metrics.ENERGY_EPS` for the loss, as in the Model-Guidance release; exactly 0 for EPG);
* ``energy-size``: ``(1 − EPG) / max(1 − a, 0.1)`` with ``a = ‖M‖₁ / HW`` the region's share of the image: the
  share of positive evidence outside the region over the share of the image outside it (:func:`energy_size_loss`);
* ``l1``: ``(1/HW) Σ |M − Â⁺|``;
* ``ppce``: ``−(1/‖M‖₁) Σ M · log Â⁺`` with ``log`` floored at −100 and its derivative ``1/Â⁺`` capped at 1e12
  (both as ``torch.nn.BCELoss``, which the Model-Guidance code uses; without the cap a denormal Â⁺ overflows
  float32), and 0 for an empty mask;
* ``rrr``: ``Σ (1 − M) · Â²`` (RRR*, a sum over pixels, so its scale grows with H·W).

**Void.** Every loss takes an optional ``void [N, H, W]`` bool: pixels counted neither inside nor outside the region
(a segmentation's void, :func:`rightreasons.regions.region_masks`), as EPG and IoU leave them out. With ``V`` the
other pixels: Energy is ``1 − Σ M·A⁺ / Σ V·A⁺``, size-corrected Energy takes ``a = ‖M‖₁ / ‖V‖₁``, L1 is the mean
of ``|M − Â⁺|`` over ``V``, RRR* sums over ``V`` outside the region; PPCE reads only the region's pixels, which are
never void. The normalisations ``Â⁺`` and ``Â`` stay those of the whole map: the void changes what is counted, not
the map. Without ``void`` every pixel counts.

All are finite, with finite gradients, for an empty mask, an all-zero or all-negative attribution and a full mask.
The Model-Guidance code normalises and clamps at the layer's resolution before upsampling; here the maps arrive
upsampled, so the normalisation uses the maximum of the upsampled map.

Reduction over the batch: ``"mean_annotated"`` (default) averages over the annotated samples — those given by
``annotated [N]`` (bool), or else those with a non-empty mask — and is 0 when none is annotated; ``"sum"`` sums over
the annotated samples, as the Model-Guidance code does (which ties the useful λ to the batch size);
``"none"`` returns the per-sample losses ``[N]`` of all samples.
"""

from __future__ import annotations

from typing import Callable, Literal

import torch
from torch import Tensor

from ..metrics.localization import ENERGY_EPS, energy_ratio

__all__ = ["LOSSES", "OUTSIDE_FLOOR", "GuidanceReduction", "LossName", "energy_loss", "energy_size_loss", "get_loss",
           "l1_loss", "normalized",
           "normalized_positive", "ppce_loss",
           "reduce_loss", "rrr_loss"]

REDUCTIONS = ("mean_annotated", "sum", "none")
Reduction = Literal[REDUCTIONS]  # type: ignore[valid-type]
LOG_FLOOR = -100.0
#: smallest denominator of the derivative of PPCE's log (``torch.nn.BCELoss``'s epsilon)
LOG_GRAD_EPS = 1e-12
#: smallest share of the image outside the region that :func:`energy_size_loss` divides by (its weight is at most 10)
OUTSIDE_FLOOR = 0.1


def _check(attributions: Tensor, masks: Tensor, name: str, void: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """Validate shapes; the masks as a float tensor of the attributions' dtype and the counted pixels ``V = ¬void``
    likewise (``None``: every pixel)."""
    if not attributions.is_floating_point():
        raise TypeError(f"{name}: attributions must be a floating-point tensor, got dtype {attributions.dtype}")
    if attributions.dim() != 3:
        raise ValueError(f"{name}: attributions must have shape [N, H, W], got {tuple(attributions.shape)}")
    if masks.shape != attributions.shape:
        raise ValueError(f"{name}: masks must have the attributions' shape {tuple(attributions.shape)}, "
                         f"got {tuple(masks.shape)}")
    if void is not None and (void.shape != attributions.shape or void.dtype != torch.bool):
        raise ValueError(f"{name}: void must be a bool tensor of the attributions' shape {tuple(attributions.shape)}, "
                         f"got {void.dtype} {tuple(void.shape)}")
    return masks.to(attributions.dtype), None if void is None else (~void).to(attributions.dtype)


def _safe_divide(numerator: Tensor, denominator: Tensor) -> Tensor:
    """``numerator / denominator`` with a zero denominator replaced by 1 (finite values and gradients)."""
    return numerator / torch.where(denominator == 0, torch.ones_like(denominator), denominator)


def _pixel_sum(x: Tensor) -> Tensor:
    return x.flatten(1).sum(1)


def normalized_positive(attributions: Tensor) -> Tensor:
    """``Â⁺ = A⁺ / max A⁺`` per sample ``[N, H, W]``; all zeros where no attribution is positive."""
    positive = attributions.clamp(min=0)
    return _safe_divide(positive, positive.flatten(1).amax(1)[:, None, None])


def normalized(attributions: Tensor) -> Tensor:
    """``Â = A / max|A|`` per sample ``[N, H, W]``; all zeros where the attribution is zero."""
    return _safe_divide(attributions, attributions.abs().flatten(1).amax(1)[:, None, None])


def reduce_loss(per_sample: Tensor, masks: Tensor, reduction: Reduction = "mean_annotated",
                annotated: Tensor | None = None) -> Tensor:
    """Reduce per-sample losses ``[N]`` over the annotated samples (see the module docstring)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; valid reductions: {list(REDUCTIONS)}")
    if reduction == "none":
        return per_sample
    if annotated is None:
        annotated = masks.flatten(1).ne(0).any(1)
    elif annotated.shape != per_sample.shape or annotated.dtype != torch.bool:
        raise ValueError(f"annotated must be a bool tensor of shape {tuple(per_sample.shape)}, "
                         f"got {annotated.dtype} {tuple(annotated.shape)}")
    total = torch.where(annotated, per_sample, torch.zeros_like(per_sample)).sum()
    if reduction == "sum":
        return total
    return total / annotated.sum().clamp(min=1)


def energy_loss(attributions: Tensor, masks: Tensor, reduction: Reduction = "mean_annotated",
                annotated: Tensor | None = None, void: Tensor | None = None) -> Tensor:
    """Energy loss ``1 − EPG = 1 − Σ M·A⁺ / Σ V·A⁺`` (eq. 7.6; :func:`~rightreasons.metrics.energy_ratio`; ``V``:
    the pixels not ``void``, all by default)."""
    mask, counted = _check(attributions, masks, "energy_loss", void)
    return reduce_loss(1 - energy_ratio(attributions, mask, counted, eps=ENERGY_EPS), masks, reduction, annotated)


def energy_size_loss(attributions: Tensor, masks: Tensor, reduction: Reduction = "mean_annotated",
                     annotated: Tensor | None = None, void: Tensor | None = None) -> Tensor:
    """Size-corrected Energy ``(1 − EPG) / max(1 − a, OUTSIDE_FLOOR)``, ``a = ‖M‖₁ / HW`` (``‖M‖₁ / ‖V‖₁`` with a
    ``void``: the region's share of the counted pixels).

    A map spreading its evidence uniformly scores ``EPG = a``, so EPG and Energy reward large regions for nothing.
    ``(EPG − a) / (1 − a)`` measures the gain over that uniform map (0 uniform, 1 all evidence inside, whatever the
    region's size); one minus it is this loss: 1 for the uniform map at every region size. It is Energy weighted per
    image by ``1 / (1 − a)``, so its gradient points where Energy's does (no prior inside the region); the weight is
    capped at ``1 / OUTSIDE_FLOOR`` for regions covering nearly the whole image (docs/guide/guidance.md)."""
    mask, counted = _check(attributions, masks, "energy_size_loss", void)
    if counted is None:
        outside = (1 - mask).flatten(1).mean(1)
    else:
        outside = 1 - _safe_divide(_pixel_sum(mask * counted), _pixel_sum(counted))
    ratio = energy_ratio(attributions, mask, counted, eps=ENERGY_EPS)
    return reduce_loss((1 - ratio) / outside.clamp(min=OUTSIDE_FLOOR), masks, reduction, annotated)


def l1_loss(attributions: Tensor, masks: Tensor, reduction: Reduction = "mean_annotated",
            annotated: Tensor | None = None, void: Tensor | None = None) -> Tensor:
    """L1 loss ``(1/HW) Σ |M − Â⁺|`` (eq. 7.3); with a ``void``, ``(1/‖V‖₁) Σ V·|M − Â⁺|``."""
    mask, counted = _check(attributions, masks, "l1_loss", void)
    distance = (mask - normalized_positive(attributions)).abs()
    per_sample = distance.flatten(1).mean(1) if counted is None else \
        _safe_divide(_pixel_sum(distance * counted), _pixel_sum(counted))
    return reduce_loss(per_sample, masks, reduction, annotated)


class _FlooredLog(torch.autograd.Function):
    """``log x`` floored at :data:`LOG_FLOOR` for ``x ≥ 0``, with derivative ``1 / max(x, LOG_GRAD_EPS)`` where
    ``x > 0`` and 0 at ``x = 0``; the backward is built from differentiable operations (second order works)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return torch.log(x).clamp(min=LOG_FLOOR)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return torch.where(x > 0, grad / x.clamp(min=LOG_GRAD_EPS), torch.zeros_like(grad))


def ppce_loss(attributions: Tensor, masks: Tensor, reduction: Reduction = "mean_annotated",
              annotated: Tensor | None = None, void: Tensor | None = None) -> Tensor:
    """Per-pixel cross-entropy ``−(1/‖M‖₁) Σ M · log Â⁺`` (eq. 7.4), ``log`` floored at −100 with a bounded
    derivative, 0 for an empty mask. It reads only the region's pixels, which are never ``void`` (checked only)."""
    mask, _ = _check(attributions, masks, "ppce_loss", void)
    log = _FlooredLog.apply(normalized_positive(attributions))
    per_sample = -_safe_divide(_pixel_sum(mask * log), _pixel_sum(mask))
    return reduce_loss(per_sample, masks, reduction, annotated)


def rrr_loss(attributions: Tensor, masks: Tensor, reduction: Reduction = "mean_annotated",
             annotated: Tensor | None = None, void: Tensor | None = None) -> Tensor:
    """RRR* ``Σ (1 − M) · Â²`` (eq. 7.5) with ``Â = A / max|A|``; with a ``void``, ``Σ V·(1 − M) · Â²``."""
    mask, counted = _check(attributions, masks, "rrr_loss", void)
    outside = 1 - mask if counted is None else (1 - mask) * counted
    per_sample = _pixel_sum(outside * normalized(attributions).square())
    return reduce_loss(per_sample, masks, reduction, annotated)


LossFn = Callable[..., Tensor]
LOSSES: dict[str, LossFn] = {"energy": energy_loss, "energy-size": energy_size_loss, "l1": l1_loss,
                             "ppce": ppce_loss, "rrr": rrr_loss}
"""Every localisation loss, by the name configs use."""
LossName = Literal[tuple(LOSSES)]  # type: ignore[valid-type]
"""The type of a config field naming a localisation loss."""
GuidanceReduction = Literal[tuple(r for r in REDUCTIONS if r != "none")]  # type: ignore[valid-type]
"""The reductions a training step can use (a scalar loss)."""


def get_loss(name: str) -> LossFn:
    """The localisation loss called ``name`` (case-insensitive; ``"RRR*"`` is accepted for ``"rrr"``)."""
    key = name.lower().rstrip("*") if isinstance(name, str) else name
    try:
        return LOSSES[key]
    except (KeyError, TypeError):
        raise ValueError(f"unknown localisation loss {name!r}; valid names: {sorted(LOSSES)}") from None
