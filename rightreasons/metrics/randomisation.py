"""Randomisation sanity checks (Adebayo et al. 2018, "Sanity checks for saliency maps", NeurIPS): an explanation
that depends on what the model learned must change when the model's weights are re-initialised (model
randomisation) or when the model is trained on randomly permuted labels (label, or data, randomisation:
:func:`label_randomisation`, which compares with a second model that the caller trained on permuted labels).

The score of each step is the Spearman rank correlation between every image's map for the model and for the
randomised model, ``[N, L]`` — *lower* means the explanation is more sensitive to the parameters, i.e. passes the
check. Two modes, as in the paper:

* ``"cascade"`` — re-initialise the layers one after another from the output down, keeping earlier ones random: step
  ``l`` has layers ``0 … l`` randomised;
* ``"independent"`` — re-initialise one layer at a time, the others as trained.

A layer is re-initialised by calling ``reset_parameters()`` on it and every submodule that has one (the layers' own
initialisation, as Quantus does), drawing on the CPU from a generator seeded with ``seed + l`` for the ``l``-th
layer: deterministic, the same on every device, and giving a layer the same weights in both modes. Ranks of tied
values are averaged (``scipy.stats.spearmanr``); a constant map (all zero, say) correlates 0 with anything. Signed
maps are compared; pass an attribution function returning ``|A|`` for the paper's absolute-value variant.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from .attribution_fn import AttributionFn, run_attribution
from .base import PerSampleMean, check_batch
from .correlation import spearman

__all__ = ["LabelRandomisation", "ModelRandomisation", "label_randomisation", "model_randomisation",
           "randomisable_layers"]

Mode = Literal["cascade", "independent"]


def randomisable_layers(model: nn.Module) -> list[str]:
    """Names of the modules that own parameters and have ``reset_parameters()``, output side first (the reverse of
    their registration order, which for most models is the forward order)."""
    return [name for name, module in reversed(list(model.named_modules()))
            if name and hasattr(module, "reset_parameters") and any(True for _ in module.parameters(recurse=False))]


def _reinitialise(layer: nn.Module, seed: int) -> None:
    """Re-draw ``layer``'s parameters and buffers in place from its own initialisation, on the CPU with ``seed``."""
    fresh = copy.deepcopy(layer).cpu()
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        for module in fresh.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
    with torch.no_grad():
        for target, value in zip(layer.state_dict().values(), fresh.state_dict().values()):
            target.copy_(value)


def _check(model: nn.Module, layers: Sequence[str], mode: str) -> list[str]:
    if mode not in ("cascade", "independent"):
        raise ValueError(f"model_randomisation: mode must be 'cascade' or 'independent', got {mode!r}")
    names, modules = list(layers), dict(model.named_modules())
    if not names or any(not name or name not in modules for name in names):
        raise ValueError(f"model_randomisation: layers must be a non-empty list of the model's module names "
                         f"(see randomisable_layers(model)), got {names}")
    return names


def model_randomisation(model: nn.Module, images: Tensor, targets: Tensor, attribution: AttributionFn,
                        layers: Sequence[str] | None = None, mode: Mode = "cascade", seed: int = 0,
                        batch_size: int = 64) -> tuple[list[str], Tensor]:
    """Spearman correlation of each image's map before and after each randomisation step (module docstring).

    Args:
        model: classifier (eval mode); it is not modified (the randomised models are copies).
        images: ``[N, C, H, W]``; targets: ``[N]`` the class explained.
        attribution: an :data:`~rightreasons.metrics.AttributionFn`.
        layers: module names, output side first; ``None`` = :func:`randomisable_layers` (every parametrised layer).
        mode: ``"cascade"`` (top-down, cumulative) or ``"independent"`` (one layer at a time).
        seed: seeds the re-initialisation.
        batch_size: images per attribution call.

    Returns:
        ``(layers, correlations [N, L])``: column ``l`` after randomising ``layers[l]`` (and, in cascade mode,
        every layer before it).
    """
    check_batch("model_randomisation", images, targets)
    names = _check(model, randomisable_layers(model) if layers is None else layers, mode)
    targets = targets.to(images.device).long()

    def maps(net: nn.Module) -> Tensor:
        return run_attribution(attribution, net, images, targets, batch_size).flatten(1)

    trained = maps(model)
    randomised = copy.deepcopy(model)
    correlations = []
    for step, name in enumerate(names):
        if mode == "independent":
            randomised = copy.deepcopy(model)
        _reinitialise(randomised.get_submodule(name), seed + step)
        correlations.append(spearman(trained, maps(randomised).to(trained.dtype)))
    return names, torch.stack(correlations, 1)


class ModelRandomisation(PerSampleMean):
    """Mean Spearman correlation per randomisation step ``[L]`` over every image passed to ``update(model, images,
    targets)``; every update re-draws the same randomised weights (``seed``). Lower is better.

    Args:
        attribution: the :data:`~rightreasons.metrics.AttributionFn` judged.
        layers: module names, output side first (fixed, as the result has one entry per layer).
        mode, seed, batch_size: as in :func:`model_randomisation`.
    """

    higher_is_better = False

    def __init__(self, attribution: AttributionFn, layers: Sequence[str], mode: Mode = "cascade", seed: int = 0,
                 batch_size: int = 64, **kwargs) -> None:
        if mode not in ("cascade", "independent") or not list(layers):
            raise ValueError(f"ModelRandomisation: need mode 'cascade' or 'independent' and a non-empty list of "
                             f"layers, got mode={mode!r} and layers={list(layers)}")
        super().__init__(score_shape=(len(layers),), **kwargs)
        self.attribution = attribution
        self.layers = list(layers)
        self.mode = mode
        self.seed = seed
        self.batch_size = batch_size

    def score(self, model: nn.Module, images: Tensor, targets: Tensor) -> Tensor:
        return model_randomisation(model, images, targets, self.attribution, self.layers, self.mode, self.seed,
                                   self.batch_size)[1]


def label_randomisation(model: nn.Module, random_label_model: nn.Module, images: Tensor, targets: Tensor,
                        attribution: AttributionFn, batch_size: int = 64) -> Tensor:
    """Spearman correlation ``[N]`` of each image's map for ``model`` and for ``random_label_model``, the same
    architecture trained the same way on the training labels randomly permuted (Adebayo et al.'s data
    randomisation test); lower is better — a map that correlates highly with a model that learned nothing but to
    memorise noise does not explain what ``model`` learned. Both explain the class ``targets [N]``.

    rightreasons trains models from configs (``rightreasons train``), not with a function taking a labelling, so the
    caller trains the permuted-label copy and passes it here. Ties, negative and constant maps as for
    :func:`model_randomisation` (mean ranks; signed maps; a constant map correlates 0).
    """
    check_batch("label_randomisation", images, targets)
    targets = targets.to(images.device).long()
    trained, randomised = (run_attribution(attribution, net, images, targets, batch_size).flatten(1)
                           for net in (model, random_label_model))
    return spearman(trained, randomised.to(trained.dtype))


class LabelRandomisation(PerSampleMean):
    """Mean Spearman correlation over every image passed to ``update(model, random_label_model, images, targets)``
    (:func:`label_randomisation`). Lower is better."""

    higher_is_better = False

    def __init__(self, attribution: AttributionFn, batch_size: int = 64, **kwargs) -> None:
        super().__init__(**kwargs)
        self.attribution = attribution
        self.batch_size = batch_size

    def score(self, model: nn.Module, random_label_model: nn.Module, images: Tensor, targets: Tensor) -> Tensor:
        return label_randomisation(model, random_label_model, images, targets, self.attribution, self.batch_size)
