"""Insertion and deletion curves over the whole image and their areas (Petsiuk et al. 2018, "RISE: randomized input
sampling for explanation of black-box models", BMVC).

Pixels are ranked by attribution, highest first (:func:`~rightreasons.metrics.perturbation.pixel_ranks`; equal
attributions in raster order, so a constant map is scored in raster order), and ``num_steps`` equal steps go from
0 to 100 % of the pixels:

* **deletion** replaces the ranked pixels (all channels) of the image by a baseline, RISE's zero (black) image —
  a faithful map makes the target score fall fast: *lower* AUC is better;
* **insertion** puts the ranked pixels of the image into a baseline, RISE's blurred copy of the image — a faithful
  map makes the score rise fast: *higher* AUC is better.

The AUC is the trapezoid-rule area under the score over the fraction of pixels (``[0, 1]``). Only the ranking of the
map is used, so the scores ignore its scale and offset; a negative pixel simply ranks low. RISE steps one row of
pixels at a time (224 steps at 224 px); ``num_steps`` trades that resolution for speed. The curves reuse the
replacement machinery of :mod:`.perturbation`, which stops at 25 % and compares most- with least-first removal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torchvision.transforms.functional import gaussian_blur

from .base import check_batch
from .perturbation import CurvePair, Output, check_output, pixel_ranks, removal_fractions, replacement_curve

__all__ = ["InsertionDeletion", "InsertionDeletionCurves", "blurred", "insertion_deletion"]


@dataclass
class InsertionDeletionCurves:
    """Curves of ``N`` samples over ``S + 1`` steps (step 0: nothing inserted / deleted).

    Attributes:
        fractions: ``[S + 1]`` fraction of pixels inserted or deleted, ``0 ... 1``.
        insertion: ``[N, S + 1]`` target score as pixels are inserted into the insertion baseline.
        deletion: ``[N, S + 1]`` target score as pixels are replaced by the deletion baseline.
        insertion_auc: ``[N]`` area under ``insertion`` (higher is better).
        deletion_auc: ``[N]`` area under ``deletion`` (lower is better).
    """

    fractions: Tensor
    insertion: Tensor
    deletion: Tensor
    insertion_auc: Tensor
    deletion_auc: Tensor


def blurred(images: Tensor, kernel_size: int = 11, sigma: float = 5.0) -> Tensor:
    """RISE's insertion baseline: the images ``[N, C, H, W]`` blurred with a ``kernel_size`` Gaussian of ``sigma``
    (reflect-padded; RISE pads with zeros, which darkens the border)."""
    if images.dim() != 4 or min(images.shape[-2:]) <= kernel_size // 2:
        raise ValueError(f"blurred: images must be [N, C, H, W] with H and W > kernel_size // 2 = {kernel_size // 2}, "
                         f"got shape {tuple(images.shape)}; pass insertion_baseline for smaller images")
    return gaussian_blur(images, [kernel_size, kernel_size], [sigma, sigma])


def insertion_deletion(model: nn.Module, images: Tensor, targets: Tensor, attributions: Tensor,
                       num_steps: int = 20, insertion_baseline: Tensor | float | None = None,
                       deletion_baseline: Tensor | float = 0.0, output: Output = "softmax",
                       batch_size: int = 64) -> InsertionDeletionCurves:
    """Insertion and deletion curves and AUCs of ``attributions`` for ``model`` (RISE).

    Args:
        model: classifier returning logits ``[N, K]`` (put it in eval mode first).
        images: ``[N, C, H, W]`` model inputs; targets: ``[N]`` the class whose score is tracked.
        attributions: ``[N, H, W]`` maps at the input resolution.
        num_steps: equal steps from 0 to all pixels (``round(fraction · H · W)`` pixels at each).
        insertion_baseline: what pixels are inserted into — a tensor broadcastable to the images, or a number;
            ``None`` = :func:`blurred` images (RISE).
        deletion_baseline: what deleted pixels become (RISE: 0; for the six-channel B-cos encoding 0 removes both
            a colour and its inverse).
        output: score tracked, ``"softmax"`` (RISE), ``"sigmoid"`` or ``"logit"``.
        batch_size: images per forward pass.
    """
    check_batch("insertion_deletion", images, targets, attributions=attributions)
    check_output("insertion_deletion", output)
    fractions = removal_fractions(num_steps, 1.0)
    counts = torch.round(fractions * images[0, 0].numel()).long().tolist()
    targets = targets.to(images.device).long()
    ranks = pixel_ranks(attributions.to(images.device))
    start = blurred(images) if insertion_baseline is None else insertion_baseline
    start = torch.as_tensor(start, dtype=images.dtype, device=images.device).expand_as(images)
    end = torch.as_tensor(deletion_baseline, dtype=images.dtype, device=images.device)
    insertion = replacement_curve(model, start, images, targets, ranks, counts, output, batch_size)
    deletion = replacement_curve(model, images, end, targets, ranks, counts, output, batch_size)
    fractions = fractions.to(device=images.device, dtype=insertion.dtype)
    return InsertionDeletionCurves(fractions, insertion, deletion, torch.trapezoid(insertion, fractions, dim=-1),
                                   torch.trapezoid(deletion, fractions, dim=-1))


class InsertionDeletion(CurvePair):
    """Mean insertion and deletion curves over every sample passed to ``update(insertion, deletion)`` (``[N, S+1]``
    each, from :func:`insertion_deletion` with the same ``num_steps``).

    ``compute()`` returns ``{"fractions": [S+1], "insertion": [S+1], "deletion": [S+1], "insertion_auc": scalar,
    "deletion_auc": scalar}``.
    """

    names = ("insertion", "deletion")   # insertion: higher is better; deletion: lower

    def __init__(self, num_steps: int = 20, **kwargs) -> None:
        super().__init__(removal_fractions(num_steps, 1.0), **kwargs)

    def compute(self) -> dict[str, Tensor]:
        out = self.curves()
        return {**out, **{f"{name}_auc": torch.trapezoid(out[name], out["fractions"]) for name in self.names}}
