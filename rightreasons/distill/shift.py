"""Explanation similarity under diagonal image shifts (thesis §8.2.3.2, Fig. 8.5 centre).

An image is shifted diagonally by ``t = 0 … T`` pixels (towards the bottom right) by cropping ``size × size`` windows
from a ``(size + T)``-pixel view of it, so no padding enters the image: the window for shift ``t`` starts at
``T − t``. For each shift the model explains the class it predicts on the unshifted image, and the explanation is
compared with the unshifted one on the area both show (the unshifted ``[0, size − t)`` against the shifted
``[t, size)`` in both axes), by cosine similarity. CNNs with strides of at most 2 per layer vary with a short period
(4 for the thesis' DenseNet), ViTs with non-overlapping 16-pixel patches with period 16 — unless e²KD teaches them the
teacher's behaviour; a student distilled with frozen explanations becomes nearly shift-equivariant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from ..metrics import explanation_similarity
from .explanations import ExplanationKind, model_explanation

__all__ = ["save_shift_plot", "shift_similarity", "shifted_view"]


def shifted_view(canvas: Tensor, size: int, shift: int) -> Tensor:
    """The ``size × size`` window of ``canvas [N, C, size + T, size + T]`` whose content is shifted by ``shift``
    pixels down and right relative to the unshifted window (the bottom-right one)."""
    extra = canvas.shape[-1] - size
    if canvas.shape[-2] != canvas.shape[-1] or not 0 <= shift <= extra:
        raise ValueError(f"shifted_view: need a square canvas [N, C, size + T, size + T] and 0 <= shift <= T, got "
                         f"canvas {tuple(canvas.shape)}, size {size}, shift {shift}")
    start = extra - shift
    return canvas[..., start:start + size, start:start + size]


def _overlap_similarity(reference: Tensor, shifted: Tensor, shift: int) -> Tensor:
    """Per-sample cosine similarity ``[N]`` of two explanations ``[N, C, S, S]`` on their common area."""
    size = reference.shape[-1]
    return explanation_similarity(reference[..., :size - shift, :size - shift], shifted[..., shift:, shift:])


def shift_similarity(model: nn.Module, batches: Iterable[Tensor], size: int, shifts: Sequence[int],
                     kind: ExplanationKind, layer: str = "final") -> Tensor:
    """Mean explanation similarity ``[len(shifts)]`` between shifted and unshifted images.

    Args:
        model: the classifier (put in eval mode here).
        batches: canvases ``[N, C, size + max(shifts), size + max(shifts)]`` encoded for the model.
        size: the model's input size.
        shifts: the diagonal shifts to evaluate (each in ``0 … max(shifts)``).
        kind: ``bcos`` (``W(x)``) or ``gradcam``; ``layer`` for GradCAM.
    """
    model.eval()
    totals = torch.zeros(len(shifts), dtype=torch.float64)
    count = 0
    for canvas in batches:
        logits, reference = model_explanation(model, shifted_view(canvas, size, 0), None, kind, layer)
        target = logits.argmax(1)
        for i, shift in enumerate(shifts):
            _, explanation = model_explanation(model, shifted_view(canvas, size, shift), target, kind, layer)
            totals[i] += _overlap_similarity(reference, explanation, shift).double().sum().cpu()
        count += canvas.shape[0]
    if count == 0:
        raise ValueError("shift_similarity: no images")
    return (totals / count).float()


def save_shift_plot(path: str | Path, shifts: Sequence[int], curves: Mapping[str, Sequence[float]],
                    title: str | None = None) -> Path:
    """Plot one similarity-vs-shift curve per model (PNG, PDF, ... by suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, values in curves.items():
        ax.plot(list(shifts), list(values), marker="o", markersize=3, label=label)
    ax.set_xlabel("diagonal shift T (pixels)")
    ax.set_ylabel("cosine similarity to T = 0")
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
