"""ROAD: RemOve And Debias (Rong et al. 2022, "A consistent and efficient evaluation strategy for attribution
methods", ICML).

Removing pixels by setting them to a baseline leaks where they were (the model sees the shape of the hole), so the
curves measure that leak as much as the attribution. ROAD replaces the removed pixels by a **noisy linear
imputation** from their neighbours instead, which hides the removal pattern:

* every removed pixel ``i`` takes the weighted mean of its 8 neighbours ``j`` inside the image, the direct
  neighbours weighted ``1/6`` and the diagonal ones ``1/12`` (the weights are renormalised at the border, where
  some neighbours are missing): ``d_i · u_i = Σ_j w_ij u_j`` with ``d_i = Σ_j w_ij``. Kept neighbours enter with
  their values, removed neighbours are unknowns too, so all removed pixels of an image are solved together — a
  sparse, symmetric linear system per image and channel (a discrete Laplace equation with the kept pixels as its
  boundary values);
* then Gaussian noise of standard deviation ``noise`` (ROAD: 0.01) is added to the removed pixels only. Kept pixels
  are left exactly as they were.

The system is solved batched on the images' device by conjugate gradients (eight shifted sums per iteration, a Jacobi
preconditioner, started from the upsampled solution of the 2×-coarser problem, recursively) to a relative residual
of ``tolerance``, rather than by the reference code's sparse direct solver per image; the solution is the same up to
that tolerance. When every pixel of an image is removed, the
system has no boundary and no unique solution (any constant solves it): the image is then filled with its own
per-channel mean, a constant that solves its equations. The noise is drawn on the CPU from a seeded ``generator``,
so that a batch is imputed alike on every device.

The curves (:func:`road`) remove pixels in the order of the attribution — most relevant first (MoRF: a faithful map
makes the score fall fast) and least relevant first (LeRF: the score stays) — at the fractions of
:func:`~rightreasons.metrics.perturbation.removal_fractions` (ROAD: 10 %, ..., 90 %), ranked by
:func:`~rightreasons.metrics.perturbation.pixel_ranks` (ties in raster order), and track the model's accuracy (ROAD's
measure) or its score of the target class. Each is summarised by its trapezoid area over the removed fraction, and
the pair by the area between them, LeRF − MoRF (:func:`~rightreasons.metrics.perturbation.area_between`): higher is
better.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import check_batch
from .perturbation import (CurvePair, Tracked, area_between, check_output, pixel_ranks, removal_fractions,
                           target_scores)

__all__ = ["DIAGONAL_WEIGHT", "DIRECT_WEIGHT", "ROAD", "ROADCurves", "noisy_linear_imputation", "road"]

DIRECT_WEIGHT, DIAGONAL_WEIGHT = 1 / 6, 1 / 12
"""ROAD's weights of a pixel's 4 direct and 4 diagonal neighbours (they sum to 1)."""

def _neighbour_sum(values: Tensor) -> Tensor:
    """``Σ_j w_ij v_j`` over the in-image neighbours of every pixel of ``values [B, H, W]``."""
    _, h, w = values.shape
    padded = F.pad(values, (1, 1, 1, 1))                 # zero outside the image: missing neighbours count 0
    direct = padded[:, :-2, 1:-1] + padded[:, 2:, 1:-1] + padded[:, 1:-1, :-2] + padded[:, 1:-1, 2:]
    diagonal = padded[:, :-2, :-2] + padded[:, :-2, 2:] + padded[:, 2:, :-2] + padded[:, 2:, 2:]
    return DIRECT_WEIGHT * direct + DIAGONAL_WEIGHT * diagonal


COARSEST = 16
"""Below this side the solver starts from constants; above it, from the solution of the 2×-coarser problem."""


def _initial(x: Tensor, hole: Tensor) -> Tensor:
    """A starting guess for the removed pixels: the problem 2× coarser (a block is kept where any of its pixels is,
    with their mean) solved and upsampled — cascadic conjugate gradients, which leaves the fine level only the
    fine-scale error to remove — or, on small images, the mean of the kept pixels. Images without a kept pixel get
    their own mean (the documented fill)."""
    b, h, w = x.shape
    kept = (~hole).to(x.dtype)
    count = kept.sum((1, 2))
    fill = torch.where(count > 0, (kept * x).sum((1, 2)) / count.clamp(min=1), x.mean((1, 2)))[:, None, None]
    if min(h, w) < COARSEST:
        return fill.expand(b, h, w)
    pool = {"kernel_size": 2, "ceil_mode": True, "divisor_override": 1}
    coarse_count = F.avg_pool2d(kept[:, None], **pool)[:, 0]
    coarse_x = F.avg_pool2d((kept * x)[:, None], **pool)[:, 0] / coarse_count.clamp(min=1)
    coarse, _ = _solve(coarse_x, coarse_count == 0, 1e-3, None)
    upsampled = coarse.repeat_interleave(2, 1).repeat_interleave(2, 2)[:, :h, :w]
    return torch.where(count[:, None, None] > 0, upsampled, fill)


def _solve(x: Tensor, hole: Tensor, tolerance: float, max_iterations: int | None) -> tuple[Tensor, int]:
    """``x [B, H, W]`` with its ``hole`` pixels solved from the neighbour-average equations by Jacobi-preconditioned
    conjugate gradients, every system on its own; and the number of systems that missed ``tolerance``."""
    _, h, w = x.shape
    holef = hole.to(x.dtype)
    degree = _neighbour_sum(torch.ones(1, h, w, dtype=x.dtype, device=x.device))     # d_i (border: < 1)

    def apply(u: Tensor) -> Tensor:                                                  # A u on the removed pixels
        return holef * (degree * u - _neighbour_sum(holef * u))

    b = holef * _neighbour_sum((1 - holef) * x)
    u = holef * _initial(x, hole)
    r = b - apply(u)
    z = holef * r / degree
    p = z
    rz = (r * z).sum((1, 2))
    limit = tolerance * b.flatten(1).norm(dim=1)
    iterations = 4 * (h + w) + 50 if max_iterations is None else max_iterations
    active = (limit > 0) & (r.flatten(1).norm(dim=1) > limit)     # b = 0: every pixel removed, u = the fill
    for step in range(iterations):
        if step % 10 == 0 and not bool(active.any()):
            break
        ap = apply(p)
        pap = (p * ap).sum((1, 2))
        alpha = torch.where(active & (pap > 0), rz / torch.where(pap > 0, pap, 1), 0)
        u = u + alpha[:, None, None] * p
        r = r - alpha[:, None, None] * ap
        active = active & (r.flatten(1).norm(dim=1) > limit)
        z = holef * r / degree
        rz_next = (r * z).sum((1, 2))
        beta = torch.where(active & (rz > 0), rz_next / torch.where(rz > 0, rz, 1), 0)
        p = z + beta[:, None, None] * p
        rz = rz_next
    return torch.where(hole, u, x), int(active.sum())


@torch.no_grad()
def noisy_linear_imputation(images: Tensor, removed: Tensor, noise: float = 0.01,
                            generator: torch.Generator | None = None, tolerance: float = 1e-6,
                            max_iterations: int | None = None) -> Tensor:
    """ROAD's noisy linear imputation of the ``removed`` pixels of ``images`` (module docstring).

    Args:
        images: ``[N, C, H, W]``; every channel is imputed on its own with the same equations.
        removed: ``[N, H, W]`` bool, the pixels (all channels) to replace.
        noise: standard deviation of the Gaussian noise added to the imputed pixels (ROAD: 0.01; 0 for none).
        generator: CPU generator of the noise (``None``: the global one).
        tolerance: relative residual ``‖b − A u‖ / ‖b‖`` at which the conjugate gradients stop, per image and
            channel.
        max_iterations: cap on the iterations (``None``: ``4 · (H + W) + 50``); a system not solved by then is
            used as it is, with a warning.

    Returns:
        ``[N, C, H, W]``: the kept pixels exactly as in ``images``, the removed ones imputed plus noise.
    """
    if images.dim() != 4 or removed.shape != (images.shape[0], *images.shape[-2:]):
        raise ValueError(f"noisy_linear_imputation: need images [N, C, H, W] and removed [N, H, W], got shapes "
                         f"{tuple(images.shape)} and {tuple(removed.shape)}")
    n, c, h, w = images.shape
    dtype = images.dtype if images.is_floating_point() else torch.float32
    x = images.to(dtype).reshape(n * c, h, w)
    hole = removed.to(device=images.device, dtype=torch.bool)[:, None].expand(n, c, h, w).reshape(n * c, h, w)
    if not hole.any():
        return images.clone()
    holef = hole.to(dtype)
    u, unsolved = _solve(x, hole, tolerance, max_iterations)
    if unsolved:
        warnings.warn(f"noisy_linear_imputation: {unsolved} of {n * c} systems did not reach the relative residual "
                      f"{tolerance} within max_iterations", stacklevel=2)
    if noise:
        u = u + holef * noise * torch.randn(n * c, h, w, generator=generator, dtype=dtype).to(x.device)
    return torch.where(hole, u, x).view(n, c, h, w).to(images.dtype)


@dataclass
class ROADCurves:
    """ROAD curves of ``N`` samples over ``S + 1`` removal steps (step 0: nothing removed).

    Attributes:
        fractions: ``[S + 1]`` fraction of pixels removed.
        morf: ``[N, S + 1]`` accuracy (0/1) or score, most relevant pixels removed first.
        lerf: ``[N, S + 1]`` the same, least relevant first.
        morf_area, lerf_area: ``[N]`` trapezoid areas under the curves over the removed fraction (MoRF: lower is
            better; LeRF: higher is better).
        area: ``[N]`` ``lerf_area − morf_area`` (higher is better).
    """

    fractions: Tensor
    morf: Tensor
    lerf: Tensor
    morf_area: Tensor
    lerf_area: Tensor
    area: Tensor


def road(model: nn.Module, images: Tensor, targets: Tensor, attributions: Tensor, num_steps: int = 9,
         max_fraction: float = 0.9, output: Tracked = "accuracy", noise: float = 0.01,
         generator: torch.Generator | None = None, batch_size: int = 64, tolerance: float = 1e-6) -> ROADCurves:
    """MoRF and LeRF ROAD curves of ``attributions`` for ``model`` (module docstring).

    Args:
        model: classifier returning logits ``[N, K]`` (eval mode).
        images: ``[N, C, H, W]`` model inputs; targets: ``[N]`` the class tracked (ROAD: the true label).
        attributions: ``[N, H, W]`` maps at the input resolution; only their ranking counts (scale and offset are
            ignored, negative pixels rank low, equal values go in raster order, a constant map in raster order).
        num_steps, max_fraction: the removed fractions ``0, max_fraction / num_steps, ..., max_fraction`` (ROAD:
            10 % to 90 %); ``round(fraction · H · W)`` pixels at each.
        output: ``"accuracy"`` (ROAD: 1 when the prediction is the target, else 0), or the target's
            ``"softmax"``, ``"sigmoid"`` or ``"logit"`` score.
        noise, generator, tolerance: of :func:`noisy_linear_imputation`; every step and order draws its own noise.
        batch_size: images per forward pass.
    """
    check_batch("road", images, targets, attributions=attributions)
    if output != "accuracy":
        check_output("road", output)
    fractions = removal_fractions(num_steps, max_fraction)
    n, _, h, w = images.shape
    counts = torch.round(fractions * h * w).long().tolist()
    targets = targets.to(images.device).long()
    curves = []
    for most_first in (True, False):
        ranks = pixel_ranks(attributions.to(images.device), most_first).view(n, h, w)
        with torch.no_grad():
            curves.append(torch.stack([
                target_scores(model, noisy_linear_imputation(images, ranks < count, noise, generator, tolerance),
                              targets, output, batch_size) for count in counts], 1))
    morf, lerf = curves
    fractions = fractions.to(device=images.device, dtype=morf.dtype)
    morf_area, lerf_area = (torch.trapezoid(curve, fractions, dim=-1) for curve in (morf, lerf))
    return ROADCurves(fractions, morf, lerf, morf_area, lerf_area, area_between(morf, lerf, fractions))


class ROAD(CurvePair):
    """Mean ROAD curves over every sample passed to ``update(morf, lerf)`` (``[N, S + 1]`` each, from :func:`road`
    with the same schedule).

    ``compute()`` returns ``{"fractions": [S+1], "morf": [S+1], "lerf": [S+1], "morf_area", "lerf_area",
    "area"}`` (scalars: the areas of the mean curves, equal to the mean areas).
    """

    names = ("morf", "lerf")   # MoRF: lower is better; LeRF and the area between: higher

    def __init__(self, num_steps: int = 9, max_fraction: float = 0.9, **kwargs) -> None:
        super().__init__(removal_fractions(num_steps, max_fraction), **kwargs)

    def compute(self) -> dict[str, Tensor]:
        out = self.curves()
        morf_area, lerf_area = (torch.trapezoid(out[name], out["fractions"]) for name in self.names)
        return {**out, "morf_area": morf_area, "lerf_area": lerf_area, "area": lerf_area - morf_area}
