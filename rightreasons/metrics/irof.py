"""IROF: Iterative Removal Of Features (Rieger & Hansen 2020, "IROF: a low resource evaluation metric for
explanation methods", ICLR workshop AI for affordable healthcare).

The image is divided into segments (superpixels). They are removed one at a time in the order of their **mean**
attribution, highest first (ties in the order of their labels), each replaced by the image's per-channel mean
value, and the target's score is tracked relative to the score of the intact image,
``y_k = f(x with the k first segments removed) / f(x)``. IROF is the area *over* that curve with the number of
removed segments normalised to ``[0, 1]``: ``1 − ∫ y d(k / S)`` (trapezoid rule over ``k = 0 … S``), higher is
better — a faithful map makes the score fall after few segments.

Segments: any integer labels ``[N, H, W]`` (one label per segment; the labels need not be consecutive, and images
may have different numbers of segments). :func:`slic_segments` gives the paper's SLIC superpixels (scikit-image,
which rightreasons does not require); :func:`grid_segments`, the default, a regular grid of square cells, which
needs nothing and scores every image on the same partition. The replacement reuses the machinery of the
pixel-perturbation curves (:func:`~rightreasons.metrics.perturbation.replacement_curve`, with segment ranks as the
pixels' ranks).

Quantus (0.6.0) reports ``S − Σ_trapezoid(y_1 … y_S)`` instead: in units of segments, without the intact image's
point ``y_0 = 1``, so it depends on the number of segments; the two are related by
``Quantus = S · IROF + (1 + y_1) / 2``. Quantus's ``"mean"`` baseline is the mean over all channels of the image
*as already perturbed*, which changes at every step; here it is the intact image's per-channel mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .base import PerSampleMean, check_batch, check_maps
from .perturbation import Output, check_output, replacement_curve

__all__ = ["IROF", "IROFCurves", "grid_segments", "irof", "segment_ranks", "slic_segments"]


def grid_segments(images: Tensor, cells: int = 10) -> Tensor:
    """Segments ``[N, H, W]`` of a ``cells × cells`` grid (row-major labels; the last row and column of cells take
    the remainder when ``cells`` does not divide the size): 100 segments by default, SLIC's default count."""
    n, _, h, w = images.shape
    if not 1 <= cells <= min(h, w):
        raise ValueError(f"grid_segments: cells must be in [1, {min(h, w)}] for {h}x{w} images, got {cells}")
    rows = (torch.arange(h, device=images.device) * cells // h)
    cols = (torch.arange(w, device=images.device) * cells // w)
    return (rows[:, None] * cells + cols[None, :]).expand(n, h, w)


def slic_segments(images: Tensor, n_segments: int = 100, compactness: float = 10.0, **options) -> Tensor:
    """SLIC superpixels ``[N, H, W]`` of every image (``skimage.segmentation.slic`` on the CPU, channels last,
    ``start_label=0``; Quantus calls it with these defaults). Needs scikit-image (not a dependency of
    rightreasons). Segment B-cos inputs ``[rgb, 1 − rgb]`` on their first three channels."""
    try:
        from skimage.segmentation import slic
    except ImportError as error:   # pragma: no cover - depends on the environment
        raise ImportError("slic_segments needs scikit-image (pip install scikit-image); or use grid_segments") \
            from error
    arrays = images.detach().double().cpu().permute(0, 2, 3, 1).numpy()
    labels = [torch.from_numpy(slic(a, n_segments=n_segments, compactness=compactness, start_label=0,
                                    channel_axis=-1, **options)) for a in arrays]
    return torch.stack(labels).long().to(images.device)


def segment_ranks(attributions: Tensor, segments: Tensor) -> tuple[Tensor, Tensor]:
    """Removal rank of every pixel's segment ``[N, H·W]`` (0 = removed first: highest mean attribution; equal means
    in the order of the labels) and the number of segments of every image ``[N]``."""
    n = attributions.shape[0]
    flat = segments.flatten(1).long()
    flat = flat - flat.min()
    span = int(flat.max()) + 1
    keyed = flat + torch.arange(n, device=flat.device)[:, None] * span
    unique, inverse = torch.unique(keyed, return_inverse=True)
    counts = torch.bincount(unique // span, minlength=n)
    local = inverse - (counts.cumsum(0) - counts)[:, None]              # 0 … S_n − 1 per image, in label order
    most = int(counts.max())
    values = attributions.flatten(1).to(torch.float64 if attributions.dtype == torch.float64 else torch.float32)
    sums = torch.zeros(n, most, dtype=values.dtype, device=values.device).scatter_add_(1, local, values)
    sizes = torch.zeros(n, most, dtype=values.dtype, device=values.device).scatter_add_(1, local,
                                                                                       torch.ones_like(values))
    means = torch.where(sizes > 0, sums / sizes.clamp(min=1), -torch.inf)   # padding segments go last
    order = means.argsort(dim=1, descending=True, stable=True).argsort(dim=1)
    return order.gather(1, local), counts


@dataclass
class IROFCurves:
    """IROF curves of ``N`` samples over ``S + 1`` steps (``S`` the largest number of segments of the batch).

    Attributes:
        fractions: ``[N, S + 1]`` removed fraction of each image's ``S_n`` segments, ``min(k, S_n) / S_n``.
        curves: ``[N, S + 1]`` target score relative to the intact image's, ``y_k`` (constant after ``S_n``).
        aoc: ``[N]`` IROF, ``1 − ∫ y d fraction`` (higher is better).
    """

    fractions: Tensor
    curves: Tensor
    aoc: Tensor


def irof(model: nn.Module, images: Tensor, targets: Tensor, attributions: Tensor, segments: Tensor | None = None,
         baseline: Tensor | float | str = "mean", output: Output = "softmax", batch_size: int = 64) -> IROFCurves:
    """IROF of ``attributions`` for ``model`` (module docstring).

    Args:
        model: classifier returning logits ``[N, K]`` (eval mode).
        images: ``[N, C, H, W]``; targets: ``[N]`` the class tracked.
        attributions: ``[N, H, W]`` maps at the input resolution; signed values are averaged per segment (negative
            evidence goes last), so scale and offset are ignored. A constant map (all zero, say) removes the
            segments in the order of their labels.
        segments: integer labels ``[N, H, W]``; ``None``: :func:`grid_segments` (10 × 10 cells).
        baseline: what removed pixels become: ``"mean"`` (the paper: each channel's mean over the intact image), a
            number, or a tensor broadcastable to the images.
        output: the score tracked (the paper: the class probability, ``"softmax"``; ``"sigmoid"`` for
            multi-label). The curve divides by the intact image's score; an image whose score is 0 (underflow)
            has no curve and scores 0.
        batch_size: images per forward pass.
    """
    check_batch("irof", images, targets)
    segments = grid_segments(images) if segments is None else segments.to(images.device)
    check_maps("irof", attributions=attributions, segments=segments)
    if attributions.shape != (images.shape[0], *images.shape[-2:]) or segments.is_floating_point():
        raise ValueError(f"irof: attributions and integer segments must be [N, H, W] = "
                         f"{[images.shape[0], *images.shape[-2:]]}, got {list(attributions.shape)}")
    check_output("irof", output)
    if isinstance(baseline, str):
        if baseline != "mean":
            raise ValueError(f"irof: baseline must be 'mean', a number or a tensor, got {baseline!r}")
        baseline = images.mean((2, 3), keepdim=True)
    baseline = torch.as_tensor(baseline, dtype=images.dtype, device=images.device)
    targets = targets.to(images.device).long()
    ranks, counts = segment_ranks(attributions.to(images.device), segments)
    steps = list(range(int(counts.max()) + 1))
    scores = replacement_curve(model, images, baseline, targets, ranks, steps, output, batch_size)
    intact = scores[:, :1]
    curves = torch.where(intact != 0, scores / torch.where(intact != 0, intact, 1), 1.0)
    k = torch.tensor(steps, device=images.device, dtype=curves.dtype)
    fractions = torch.minimum(k[None], counts[:, None].to(curves.dtype)) / counts[:, None].to(curves.dtype)
    return IROFCurves(fractions, curves, 1 - torch.trapezoid(curves, fractions, dim=-1))


class IROF(PerSampleMean):
    """Mean IROF over every sample passed to ``update(aoc [N])`` (from :func:`irof`)."""

    def score(self, aoc: Tensor) -> Tensor:
        if aoc.dim() != 1:
            raise ValueError(f"IROF.update: aoc must be [N], got {tuple(aoc.shape)}")
        return aoc

