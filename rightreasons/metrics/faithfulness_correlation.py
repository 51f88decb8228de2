"""Faithfulness correlation (Bhatt et al. 2020, "Evaluating and aggregating feature-based model explanations",
IJCAI): does the attribution of a set of pixels predict how much the output drops when the set is removed?

For ``R`` random subsets ``S`` of ``subset_size`` pixels, the score is the Pearson correlation, over the subsets,
between ``Σ_{p∈S} A_p`` and ``f(x) − f(x with S replaced by a baseline)`` (all channels of a pixel), in ``[−1, 1]``;
higher is better. Quantus's defaults: 100 subsets of 224 pixels, a zero baseline, the target's logit.

The subsets are drawn once per call from ``generator`` and shared by every image of the call, so a batch scores as
its images do one by one with the same seed. Pearson's correlation ignores the map's scale and offset (every subset
has the same size). **Degenerate case:** when the attribution sums or the output drops do not vary over the subsets
— an all-zero or constant map, or a model blind to the removed pixels — the correlation is undefined and scores 0
(no linear relation shown); Quantus returns NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .base import PerSampleMean, check_batch
from .correlation import pearson
from .perturbation import Output, check_output, target_scores

__all__ = ["FaithfulnessCorrelation", "faithfulness_correlation", "random_subsets"]


def random_subsets(num_pixels: int, num_subsets: int, subset_size: int,
                   generator: torch.Generator | None = None) -> Tensor:
    """Bool masks ``[num_subsets, num_pixels]``, each holding ``subset_size`` pixels drawn without replacement
    (on the CPU, so that a seed gives the same subsets on every device)."""
    if not 1 <= subset_size <= num_pixels or num_subsets < 2:
        raise ValueError(f"random_subsets: need 1 <= subset_size <= {num_pixels} pixels and num_subsets >= 2, "
                         f"got subset_size={subset_size} and num_subsets={num_subsets}")
    chosen = torch.rand(num_subsets, num_pixels, generator=generator).argsort(1)[:, :subset_size]
    return torch.zeros(num_subsets, num_pixels, dtype=torch.bool).scatter_(1, chosen, True)


@torch.no_grad()
def faithfulness_correlation(model: nn.Module, images: Tensor, targets: Tensor, attributions: Tensor,
                             num_subsets: int = 100, subset_size: int = 224, baseline: Tensor | float = 0.0,
                             output: Output = "logit", generator: torch.Generator | None = None,
                             batch_size: int = 64) -> Tensor:
    """Faithfulness correlation per image ``[N]`` (module docstring).

    Args:
        model: classifier returning logits ``[N, K]`` (put it in eval mode first).
        images: ``[N, C, H, W]``; targets: ``[N]`` the class whose output is tracked.
        attributions: ``[N, H, W]`` maps at the input resolution.
        num_subsets, subset_size: ``R >= 2`` subsets of ``1 <= subset_size <= H·W`` pixels (Quantus: 100, 224).
        baseline: value of removed pixels, a number or a tensor broadcastable to ``[N, C, H, W]``.
        output: ``"logit"`` (Quantus), ``"softmax"`` or ``"sigmoid"``.
        generator: a CPU generator seeding the subsets (``None``: the global one).
        batch_size: images per forward pass.
    """
    check_batch("faithfulness_correlation", images, targets, attributions=attributions)
    n, c, h, w = images.shape
    check_output("faithfulness_correlation", output)
    subsets = random_subsets(h * w, num_subsets, subset_size, generator).to(images.device)
    targets = targets.to(images.device).long()
    baseline = torch.as_tensor(baseline, dtype=images.dtype, device=images.device).expand_as(images)
    sums = attributions.to(images.device).flatten(1) @ subsets.T.to(attributions.dtype)          # [N, R]
    full = target_scores(model, images, targets, output, batch_size)
    drops = torch.stack([full - target_scores(model, torch.where(subset.view(1, 1, h, w), baseline, images),
                                              targets, output, batch_size) for subset in subsets], 1)   # [N, R]
    return pearson(sums.to(drops.dtype), drops)


class FaithfulnessCorrelation(PerSampleMean):
    """Mean :func:`faithfulness_correlation` over every image passed to ``update(model, images, targets,
    attributions)``; the subsets come from a generator seeded with ``seed`` that advances with every update.

    Args:
        num_subsets, subset_size, baseline, output, batch_size: as in :func:`faithfulness_correlation`.
        seed: seeds the subsets.
    """

    def __init__(self, num_subsets: int = 100, subset_size: int = 224, baseline: Tensor | float = 0.0,
                 output: Output = "logit", seed: int = 0, batch_size: int = 64, **kwargs) -> None:
        super().__init__(**kwargs)
        check_output("FaithfulnessCorrelation", output)
        self.options = {"num_subsets": num_subsets, "subset_size": subset_size, "baseline": baseline,
                        "output": output, "batch_size": batch_size}
        self.generator = torch.Generator().manual_seed(seed)

    def score(self, model: nn.Module, images: Tensor, targets: Tensor, attributions: Tensor) -> Tensor:
        return faithfulness_correlation(model, images, targets, attributions, generator=self.generator,
                                        **self.options)
