"""Pixel-perturbation curves (docs/science.md, evaluating explanations; thesis §5.3.2 and app. B, following Srinivas &
Fleuret 2019).

Pixels are ranked by their attribution and removed (all channels set to a baseline, by default the zero vector)
in order — most important first and least important first — in ``num_steps`` equal steps up to ``max_fraction``
(25 %) of the image, tracking the model's confidence in the target class after each step. A faithful attribution
makes the most-important-first curve fall fast and keeps the least-important-first curve level (or rising, when
negatively attributed pixels go first); the area between them (least − most, integrated over the removed fraction
with the trapezoid rule) summarises this: larger is better. The papers remove one pixel at a time; ``num_steps``
trades that resolution for speed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from .attribution_fn import AttributionFn, run_attribution
from .base import PerSampleMean, check_batch

__all__ = ["CurvePair", "PerturbationCurves", "PixelPerturbation", "area_between", "check_output", "perturbation_curves",
           "pixel_ranks", "removal_fractions", "replacement_curve", "target_scores"]

Output = Literal["logit", "softmax", "sigmoid"]
Tracked = Literal["logit", "softmax", "sigmoid", "accuracy"]
"""What :func:`target_scores` tracks: a score of the target class, or ``"accuracy"`` (1 where the prediction is the
target, else 0; ROAD's measure)."""


@dataclass
class PerturbationCurves:
    """Confidence curves of ``N`` samples over ``S + 1`` removal steps (step 0 = nothing removed).

    Attributes:
        fractions: ``[S + 1]`` fraction of pixels removed at each step.
        most_first: ``[N, S + 1]`` target score when removing the most important pixels first.
        least_first: ``[N, S + 1]`` target score when removing the least important pixels first.
        area: ``[N]`` area between the curves, ``∫ (least_first − most_first) d fraction``.
    """

    fractions: Tensor
    most_first: Tensor
    least_first: Tensor
    area: Tensor


def removal_fractions(num_steps: int = 10, max_fraction: float = 0.25) -> Tensor:
    """The ``num_steps + 1`` removal fractions ``0, max_fraction/num_steps, ..., max_fraction`` (float64)."""
    if num_steps < 1 or not 0 < max_fraction <= 1:
        raise ValueError(f"need num_steps >= 1 and 0 < max_fraction <= 1, got {num_steps} and {max_fraction}")
    return torch.linspace(0.0, max_fraction, num_steps + 1, dtype=torch.float64)


def area_between(most_first: Tensor, least_first: Tensor, fractions: Tensor) -> Tensor:
    """Trapezoid-rule area ``∫ (least_first − most_first) d fraction`` along the last dimension."""
    return torch.trapezoid(least_first - most_first, fractions.to(most_first), dim=-1)


def check_output(where: str, output: str) -> None:
    """Raise ``ValueError`` unless ``output`` names a score :func:`target_scores` can track."""
    if output not in ("logit", "softmax", "sigmoid"):
        raise ValueError(f"{where}: output must be 'logit', 'softmax' or 'sigmoid', got {output!r}")


def target_scores(model: nn.Module, x: Tensor, targets: Tensor, output: Tracked = "softmax",
                  batch_size: int = 64) -> Tensor:
    """The model's ``output`` score ``[N]`` of class ``targets [N]`` on images ``x [N, C, H, W]`` (``"accuracy"``:
    1.0 where the prediction is the target), ``batch_size`` images per forward pass."""
    scores = []
    for start in range(0, len(x), batch_size):
        logits = model(x[start:start + batch_size])
        if output == "accuracy":
            scores.append((logits.argmax(1) == targets[start:start + batch_size]).to(logits.dtype))
            continue
        if output == "softmax":
            logits = logits.softmax(1)
        elif output == "sigmoid":
            logits = logits.sigmoid()
        scores.append(logits.gather(1, targets[start:start + batch_size, None])[:, 0])
    return torch.cat(scores)


def pixel_ranks(attributions: Tensor, most_first: bool = True) -> Tensor:
    """Removal rank ``[N, H·W]`` of every pixel of maps ``[N, H, W]`` (0 = removed first): highest attribution first,
    or lowest first with ``most_first=False``; pixels with equal attribution go in raster order."""
    flat = attributions.flatten(1)
    return flat.argsort(dim=1, descending=most_first, stable=True).argsort(dim=1)


@torch.no_grad()
def replacement_curve(model: nn.Module, images: Tensor, replacement: Tensor | float, targets: Tensor, ranks: Tensor,
                      counts: list[int], output: Output = "softmax", batch_size: int = 64) -> Tensor:
    """Target scores ``[N, S+1]`` after replacing the ``counts[s]`` lowest-ranked pixels (all channels) of every
    image ``[N, C, H, W]`` by ``replacement`` (broadcastable to the images). Removal puts a baseline in the images;
    insertion puts the images in a baseline (``images`` = the baseline, ``replacement`` = the images)."""
    n, _, h, w = images.shape
    curve = []
    for count in counts:
        replaced = (ranks < count).view(n, 1, h, w)
        curve.append(target_scores(model, torch.where(replaced, replacement, images), targets, output, batch_size))
    return torch.stack(curve, 1)


def perturbation_curves(model: nn.Module, images: Tensor, targets: Tensor, attribution: AttributionFn,
                        num_steps: int = 10, max_fraction: float = 0.25, baseline: float | Tensor = 0.0,
                        output: Output = "softmax", batch_size: int = 64) -> PerturbationCurves:
    """Most- and least-important-first perturbation curves of ``attribution`` for ``model``.

    Args:
        model: classifier returning logits ``[N, K]`` (put it in eval mode first).
        images: ``[N, C, H, W]`` model inputs; ``targets``: ``[N]`` the class whose confidence is tracked.
        attribution: an :data:`~rightreasons.metrics.AttributionFn` (maps at the input resolution); pixels with
            equal attribution are removed in raster order.
        num_steps, max_fraction: removal schedule, see :func:`removal_fractions`; ``round(fraction · H · W)``
            pixels are removed at each step.
        baseline: value of removed pixels — a number, or a tensor broadcastable to ``[N, C, H, W]`` such as a
            per-channel ``[C, 1, 1]`` (zeros in all six channels of the B-cos encoding by default, as in the
            thesis; pass the encoding of a grey pixel to remove "to grey" instead).
        output: confidence tracked — ``"softmax"`` probability, ``"sigmoid"`` probability (multi-label) or raw
            ``"logit"``.
        batch_size: images per forward pass.
    """
    check_batch("perturbation_curves", images, targets)
    check_output("perturbation_curves", output)
    fractions = removal_fractions(num_steps, max_fraction)
    n, _, h, w = images.shape
    counts = torch.round(fractions * h * w).long().tolist()
    targets = targets.to(images.device).long()
    maps = run_attribution(attribution, model, images, targets)
    baseline = torch.as_tensor(baseline, dtype=images.dtype, device=images.device)
    most, least = (replacement_curve(model, images, baseline, targets, pixel_ranks(maps, most_first), counts, output,
                                     batch_size) for most_first in (True, False))
    fractions = fractions.to(device=images.device, dtype=most.dtype)
    return PerturbationCurves(fractions, most, least, area_between(most, least, fractions))


class CurvePair(PerSampleMean):
    """Mean of two per-sample curves over every sample passed to ``update(first, second)`` (``[N, S+1]`` each, at
    the removal ``fractions [S+1]``), across batches and processes: the one accumulator of the perturbation metrics
    (:class:`PixelPerturbation`, :class:`~rightreasons.metrics.insertion_deletion.InsertionDeletion`,
    :class:`~rightreasons.metrics.road.ROAD`), which name the two curves (:attr:`names`) and add their areas.

    :meth:`curves` returns ``{"fractions": [S+1], names[0]: [S+1], names[1]: [S+1]}``; the area of a mean curve
    equals the mean of the per-sample areas (the trapezoid rule is linear).
    """

    names: tuple[str, str] = ("first", "second")
    higher_is_better = None

    def __init__(self, fractions: Tensor, **kwargs) -> None:
        super().__init__(score_shape=(2, len(fractions)), **kwargs)
        self.fractions = fractions

    def score(self, first: Tensor, second: Tensor) -> Tensor:
        steps = len(self.fractions)
        if first.shape != second.shape or first.dim() != 2 or first.shape[1] != steps:
            raise ValueError(f"{type(self).__name__}.update: {' and '.join(self.names)} must both be [N, {steps}], "
                             f"got {tuple(first.shape)} and {tuple(second.shape)}")
        return torch.stack([first, second], 1)

    def curves(self) -> dict[str, Tensor]:
        first, second = super().compute()
        fractions = self.fractions.to(device=first.device, dtype=first.dtype)
        return {"fractions": fractions, self.names[0]: first, self.names[1]: second}


class PixelPerturbation(CurvePair):
    """Mean perturbation curves and area over all samples passed to ``update(most_first, least_first)``
    (``[N, S+1]`` each, e.g. from :func:`perturbation_curves` with the same schedule).

    ``compute()`` returns ``{"fractions": [S+1], "most_first": [S+1], "least_first": [S+1], "area": scalar}``.
    """

    names = ("most_first", "least_first")
    higher_is_better = True

    def __init__(self, num_steps: int = 10, max_fraction: float = 0.25, **kwargs) -> None:
        super().__init__(removal_fractions(num_steps, max_fraction), **kwargs)

    def compute(self) -> dict[str, Tensor]:
        out = self.curves()
        return {**out, "area": area_between(out["most_first"], out["least_first"], out["fractions"])}
