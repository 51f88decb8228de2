"""Colour explanations of B-cos models (the B-cos v2 release's colour decoding of ``W(x)``) and figures."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from ..plotting import figure

__all__ = ["contribution_limits", "save_explanation", "to_rgba"]


def to_rgba(image6: Tensor, weights: Tensor, smooth: int = 15, alpha_percentile: float = 99.5) -> Tensor:
    """Decode a dynamic linear map into a colour image ``[H, W, 4]`` (or ``[N, H, W, 4]`` for batches).

    Args:
        image6: the encoded input ``[6, H, W]`` (``[r, g, b, 1-r, 1-g, 1-b]``) or ``[N, 6, H, W]``.
        weights: ``W(x)`` of the same shape.
        smooth: average-pooling window for the opacity (0 disables smoothing).
        alpha_percentile: opacity is divided by this percentile and clipped to [0, 1].

    Colour: ``W / max_c |W|``, clamped at 0, then ``rgb = w[:3] / (w[:3] + w[3:])`` (the angle of each colour pair).
    Opacity: ``‖W‖₂`` over channels, ~0 where the pixel's contribution ``Σ_c W ⊙ x`` is negative, smoothed and scaled.
    """
    if image6.shape != weights.shape or image6.dim() not in (3, 4) or image6.shape[-3] != 6:
        raise ValueError(f"to_rgba expects image6 and weights of equal shape [6, H, W] or [N, 6, H, W], "
                         f"got {tuple(image6.shape)} and {tuple(weights.shape)}")
    if image6.dim() == 4:
        return torch.stack([to_rgba(i, w, smooth, alpha_percentile) for i, w in zip(image6, weights)])
    weights = weights.detach().float().cpu()
    contributions = (image6.detach().float().cpu() * weights).sum(0, keepdim=True)
    rgb = (weights / (weights.abs().amax(0, keepdim=True) + 1e-12)).clamp(min=0)
    rgb = rgb[:3] / (rgb[:3] + rgb[3:] + 1e-12)
    alpha = weights.norm(p=2, dim=0, keepdim=True)
    alpha = torch.where(contributions < 0, torch.full_like(alpha, 1e-12), alpha)
    if smooth:
        alpha = F.avg_pool2d(alpha, smooth, stride=1, padding=(smooth - 1) // 2)
    alpha = (alpha / (torch.quantile(alpha, q=alpha_percentile / 100) + 1e-12)).clip(0, 1)
    return torch.cat([rgb, alpha], dim=0).permute(1, 2, 0)


def contribution_limits(contributions: Tensor, percentile: float = 99.5) -> float:
    """Symmetric colour limit for a contribution map: the ``percentile`` of ``|contributions|``."""
    return float(torch.quantile(contributions.detach().abs().float().flatten(), percentile / 100)) or 1.0


def save_explanation(path: str | Path, image6: Tensor, weights: Tensor, title: str | None = None) -> Path:
    """Save a figure with the input, the colour explanation and the contribution map side by side (PNG, PDF, ...)."""
    rgba = to_rgba(image6, weights).numpy()
    contributions = (image6 * weights).sum(0).detach().float().cpu()
    limit = contribution_limits(contributions)
    with figure(path, 1, 3, size=(9, 3.2), title=title) as (_, axes):
        axes[0, 0].imshow(image6[:3].detach().float().cpu().permute(1, 2, 0).clamp(0, 1).numpy())
        axes[0, 0].set_title("input")
        axes[0, 1].imshow(rgba)
        axes[0, 1].set_title("explanation W(x)")
        axes[0, 2].imshow(contributions.numpy(), cmap="bwr", vmin=-limit, vmax=limit)
        axes[0, 2].set_title("contributions")
        for ax in axes.flat:
            ax.set_axis_off()
    return Path(path)
