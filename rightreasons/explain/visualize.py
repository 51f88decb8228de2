"""Colour explanations of B-cos models (the B-cos v2 release's colour decoding of ``W(x)``) and the figure that
shows one: :func:`save_explanation`, used by ``rightreasons explain``, the trainer's validation images and the demo.

A figure explains itself: its title names the class (not its index) and the model's probability for it
(:func:`prediction_caption`; the caller computes the probabilities with the link the model was trained with,
:func:`rightreasons.classification.loss.class_probabilities`), the ground-truth boxes are drawn on every panel, and the
contribution map has a colour bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from matplotlib.patches import Rectangle
from torch import Tensor

from ..boxes import outline
from ..plotting import figure

__all__ = ["class_name", "contribution_limits", "prediction_caption", "save_explanation", "to_rgba"]


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


def class_name(index: int, classes: Sequence[str] | None) -> str:
    """The name of class ``index``, or ``"class <index>"`` when the names are unknown."""
    return str(classes[index]) if classes is not None else f"class {index}"


def prediction_caption(probabilities: Tensor, target: int, classes: Sequence[str] | None = None,
                       logits: Tensor | None = None) -> str:
    """``"<explained class> p=<its probability>"`` (and ``", logit <z>"`` when ``logits`` are given), followed by the
    predicted class and its probability when the model predicts another one. ``probabilities`` and ``logits`` are
    ``[K]`` for one image. The probability has three decimals and the logit three significant digits, so that a model
    whose probabilities all lie near chance (B-cos networks trained briefly have logits of order 1e-3) shows how
    near, and which way."""
    p = probabilities.detach().float().cpu()
    text = f"{class_name(target, classes)} p={float(p[target]):.3f}"
    if logits is not None:
        text += f", logit {float(logits[target]):+.3g}"
    predicted = int(p.argmax())
    if predicted != target:
        text += f" (predicted: {class_name(predicted, classes)} p={float(p[predicted]):.3f})"
    return text


def save_explanation(path: str | Path, image6: Tensor, weights: Tensor, title: str | None = None, *,
                     boxes: Tensor | Sequence[Sequence[float]] | None = None) -> Path:
    """Save a figure with the input, the colour explanation and the contribution map side by side (PNG, PDF, ...).

    Args:
        image6: the encoded input ``[6, H, W]``; weights: its ``W(x)`` ``[6, H, W]``.
        title: what is explained, e.g. :func:`prediction_caption`.
        boxes: ground-truth boxes ``[M, 4]`` (``x1, y1, x2, y2`` in pixels), outlined on every panel.

    The contribution map ``Σ_c W ⊙ x`` is drawn blue (negative) to red (positive) with symmetric limits
    (:func:`contribution_limits`) and a colour bar.
    """
    rgba = to_rgba(image6, weights).numpy()
    contributions = (image6 * weights).sum(0).detach().float().cpu()
    limit = contribution_limits(contributions)
    outlines = [outline(box) for box in torch.as_tensor(boxes if boxes is not None else [], dtype=torch.float64)
                .reshape(-1, 4).tolist()]
    with figure(path, 1, 3, size=(10, 3.4), title=title) as (fig, axes):
        axes[0, 0].imshow(image6[:3].detach().float().cpu().permute(1, 2, 0).clamp(0, 1).numpy())
        axes[0, 0].set_title("input" + (" + box" if outlines else ""))
        axes[0, 1].imshow(rgba)
        axes[0, 1].set_title("explanation W(x)")
        shown = axes[0, 2].imshow(contributions.numpy(), cmap="bwr", vmin=-limit, vmax=limit)
        axes[0, 2].set_title("contributions")
        fig.colorbar(shown, ax=axes[0, 2], fraction=0.046, pad=0.04, label="Σ_c W ⊙ x per pixel")
        for ax, colour in zip(axes.flat, ("yellow", "black", "black")):
            for x, y, width, height in outlines:
                ax.add_patch(Rectangle((x, y), width, height, fill=False, color=colour, lw=1.2))
            ax.set_axis_off()
    return Path(path)
