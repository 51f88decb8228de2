"""Robustness of explanations to small input changes (Yeh et al. 2019, "On the (in)fidelity and sensitivity of
explanations", NeurIPS); lower is better for both.

* :func:`sensitivities` — for ``R`` perturbations ``δ`` drawn uniformly from the L∞ ball of ``radius``, the change
  ``‖Φ(x + δ) − Φ(x)‖_F / ‖Φ(x)‖_F`` of the map; **max-sensitivity** is its maximum over the perturbations, **avg-
  sensitivity** its mean. Dividing by ``‖Φ(x)‖`` (as Captum's ``sensitivity_max`` and Quantus do) makes the score
  scale-free; an all-zero map is not divided (Captum's rule), so it scores ``max ‖Φ(x + δ)‖``.
* :func:`infidelity` — for ``R`` perturbations ``I`` (Gaussian noise of ``std`` per pixel, shared by its channels),
  ``E[(Σ I·Φ − (f(x) − f(x − I)))²]``: how badly the map, read as a linear model of the output, predicts the change
  of the target's output. With ``normalize=True`` (the default here, Captum's option) the map is first scaled by the
  best factor ``β = E[Σ I·Φ · Δf] / E[(Σ I·Φ)²]``, so the score ignores the map's scale; an all-zero map gets
  ``β = 0`` and scores ``E[Δf²]``.

The perturbations are drawn once per call from a seeded CPU ``generator`` and shared by every image of the call, so a
batch scores as its images do one by one, on any device. Ties need no rule.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attribution_fn import AttributionFn, run_attribution
from .base import PerSampleMean, check_batch, check_maps
from .perturbation import Output, check_output, target_scores

__all__ = ["Infidelity", "Sensitivity", "infidelity", "sensitivities"]


def _check_batch(where: str, images: Tensor, targets: Tensor, num_samples: int, spread: float, name: str) -> None:
    check_batch(where, images, targets)
    if num_samples < 1 or not spread > 0:
        raise ValueError(f"{where}: need num_samples >= 1 and {name} > 0, got {num_samples} and {spread}")


def sensitivities(model: nn.Module, images: Tensor, targets: Tensor, attribution: AttributionFn,
                  radius: float = 0.02, num_samples: int = 10, generator: torch.Generator | None = None,
                  batch_size: int = 64) -> Tensor:
    """Relative change ``‖Φ(x + δ) − Φ(x)‖_F / ‖Φ(x)‖_F`` of the maps under each perturbation, ``[N, R]`` (module
    docstring); ``.amax(1)`` is the max-sensitivity, ``.mean(1)`` the avg-sensitivity.

    Args:
        model: classifier (eval mode); images: ``[N, C, H, W]``; targets: ``[N]`` the class explained.
        attribution: an :data:`~rightreasons.metrics.AttributionFn`, run on the images and on every perturbation.
        radius: half-width of the uniform noise added to every input value (Captum: 0.02).
        num_samples: ``R``, perturbations per image (Captum: 10).
        generator: a CPU generator seeding the noise (``None``: the global one).
        batch_size: images per attribution call.
    """
    _check_batch("sensitivities", images, targets, num_samples, radius, "radius")
    targets = targets.to(images.device).long()
    maps = run_attribution(attribution, model, images, targets, batch_size)
    noise = (torch.rand(num_samples, *images.shape[1:], generator=generator, dtype=images.dtype) * 2 - 1) * radius
    norm = maps.flatten(1).norm(dim=1)
    norm = torch.where(norm > 0, norm, torch.ones_like(norm))
    changes = []
    for delta in noise.to(images.device):
        perturbed = run_attribution(attribution, model, images + delta, targets, batch_size)
        changes.append((perturbed - maps).flatten(1).norm(dim=1) / norm)
    return torch.stack(changes, 1)


@torch.no_grad()
def infidelity(model: nn.Module, images: Tensor, targets: Tensor, attributions: Tensor, std: float = 0.1,
               num_samples: int = 10, normalize: bool = True, output: Output = "logit",
               generator: torch.Generator | None = None, batch_size: int = 64) -> Tensor:
    """Infidelity per image ``[N]`` (module docstring).

    Args:
        model: classifier (eval mode); images: ``[N, C, H, W]``; targets: ``[N]`` the class explained.
        attributions: ``[N, H, W]`` maps at the input resolution.
        std: standard deviation of the Gaussian noise ``I`` subtracted from each pixel (all channels).
        num_samples: ``R``, perturbations per image (Captum: 10).
        normalize: scale each map by its best factor ``β`` first (scale-free; Captum's default is ``False``).
        output: ``"logit"``, ``"softmax"`` or ``"sigmoid"`` score of the target.
        generator: a CPU generator seeding the noise (``None``: the global one).
        batch_size: images per forward pass.
    """
    _check_batch("infidelity", images, targets, num_samples, std, "std")
    check_maps("infidelity", attributions=attributions)
    n, _, h, w = images.shape
    if attributions.shape != (n, h, w):
        raise ValueError(f"infidelity: attributions must be [N, H, W] = {[n, h, w]}, got {list(attributions.shape)}")
    check_output("infidelity", output)
    targets = targets.to(images.device).long()
    noise = (torch.randn(num_samples, h, w, generator=generator, dtype=images.dtype) * std).to(images.device)
    full = target_scores(model, images, targets, output, batch_size)
    drops = torch.stack([full - target_scores(model, images - i, targets, output, batch_size) for i in noise], 1)
    sums = (attributions.to(images.device).flatten(1) @ noise.flatten(1).T.to(attributions.dtype)).to(drops.dtype)
    if normalize:
        power = sums.square().mean(1)
        beta = torch.where(power > 0, (sums * drops).mean(1) / torch.where(power > 0, power, 1.0), 0.0)
        sums = beta[:, None] * sums
    return (sums - drops).square().mean(1)


class Sensitivity(PerSampleMean):
    """Mean max- and avg-sensitivity over every image passed to ``update(model, images, targets)``; ``compute()``
    returns ``{"max_sensitivity": scalar, "avg_sensitivity": scalar}``. Lower is better.

    Args:
        attribution: the :data:`~rightreasons.metrics.AttributionFn` judged.
        radius, num_samples, batch_size: as in :func:`sensitivities`.
        seed: seeds the noise; the generator advances with every update.
    """

    higher_is_better = False

    def __init__(self, attribution: AttributionFn, radius: float = 0.02, num_samples: int = 10, seed: int = 0,
                 batch_size: int = 64, **kwargs) -> None:
        super().__init__(score_shape=(2,), **kwargs)
        self.attribution = attribution
        self.options = {"radius": radius, "num_samples": num_samples, "batch_size": batch_size}
        self.generator = torch.Generator().manual_seed(seed)

    def score(self, model: nn.Module, images: Tensor, targets: Tensor) -> Tensor:
        changes = sensitivities(model, images, targets, self.attribution, generator=self.generator, **self.options)
        return torch.stack([changes.amax(1), changes.mean(1)], 1)

    def compute(self) -> dict[str, Tensor]:
        worst, mean = super().compute()
        return {"max_sensitivity": worst, "avg_sensitivity": mean}


class Infidelity(PerSampleMean):
    """Mean :func:`infidelity` over every image passed to ``update(model, images, targets, attributions)``; lower
    is better.

    Args:
        std, num_samples, normalize, output, batch_size: as in :func:`infidelity`.
        seed: seeds the noise; the generator advances with every update.
    """

    higher_is_better = False

    def __init__(self, std: float = 0.1, num_samples: int = 10, normalize: bool = True, output: Output = "logit",
                 seed: int = 0, batch_size: int = 64, **kwargs) -> None:
        super().__init__(**kwargs)
        check_output("Infidelity", output)
        self.options = {"std": std, "num_samples": num_samples, "normalize": normalize, "output": output,
                        "batch_size": batch_size}
        self.generator = torch.Generator().manual_seed(seed)

    def score(self, model: nn.Module, images: Tensor, targets: Tensor, attributions: Tensor) -> Tensor:
        return infidelity(model, images, targets, attributions, generator=self.generator, **self.options)
