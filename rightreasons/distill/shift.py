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

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn

from ..explain import attribute, layer_for
from ..metrics import explanation_similarity

__all__ = ["shift_similarity", "shifted_view"]


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
                     method: str, layer: str = "final") -> Tensor:
    """Mean explanation similarity ``[len(shifts)]`` between shifted and unshifted images.

    Args:
        model: the classifier (put in eval mode here).
        batches: canvases ``[N, C, size + max(shifts), size + max(shifts)]`` encoded for the model.
        size: the model's input size.
        shifts: the diagonal shifts to evaluate (each in ``0 … max(shifts)``).
        method: the explanation compared (e.g. ``bcos_weights``: ``W(x)``, or ``gradcam``), at ``layer`` (the input for
            input-only methods).
    """
    model.eval()
    layer = layer_for(method, layer)
    totals = torch.zeros(len(shifts), dtype=torch.float64)
    count = 0
    for canvas in batches:
        unshifted = attribute(model, shifted_view(canvas, size, 0), None, method, layer)
        reference, target = unshifted.explanation, unshifted.logits.argmax(1)
        for i, shift in enumerate(shifts):
            explanation = attribute(model, shifted_view(canvas, size, shift), target, method, layer).explanation
            totals[i] += _overlap_similarity(reference, explanation, shift).double().sum().cpu()
        count += canvas.shape[0]
    if count == 0:
        raise ValueError("shift_similarity: no images")
    return (totals / count).float()
