"""DFR — Deep Feature Reweighting (Kirichenko et al., ICLR 2023): keep a trained model's features, retrain only its
last layer on group-balanced held-out data.

The published protocol (DFR^Val_Tr), which :func:`deep_feature_reweighting` follows:

1. features: the pooled input of the model's classifier (``forward_head(..., pre_logits=True)``) of every
   validation image, standardised with the validation split's mean and standard deviation;
2. selection: the validation split is cut in two random halves (:func:`halves`); for every regularisation strength
   ``C`` of the grid, an ℓ1-regularised logistic regression is fitted on a group-balanced subset of the *first* half
   (:func:`balanced`) and scored by worst-group accuracy on the *second* half; the best ``C`` wins;
3. final layer: with that ``C``, ``retrains`` logistic regressions on group-balanced subsets of the *whole*
   validation split, their weights and biases averaged.

The test split is never an input: :func:`score_last_layer` scores the result on whatever split it is given.
The logistic regression (:func:`fit_logistic`) minimises ``mean CE + ‖W‖₁ / (C·n)`` — scikit-learn's ``liblinear``
objective divided by ``n`` — by proximal gradient descent with a fixed step and iteration count (deterministic).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import UsageError
from ..metrics.evaluation import score_model

__all__ = ["C_GRID", "DFRResult", "LastLayer", "balanced", "deep_feature_reweighting", "extract_features",
           "fit_logistic", "group_accuracies", "halves", "score_last_layer"]

C_GRID = (1.0, 0.7, 0.3, 0.1, 0.07, 0.03, 0.01)
"""The inverse ℓ1 strengths the published code searches."""


@dataclass(frozen=True)
class LastLayer:
    """A linear classifier on standardised features: ``logits = ((f − mean) / scale) Wᵀ + b``.

    Attributes: ``weight [K, D]``, ``bias [K]``, ``mean [D]``, ``scale [D]``.
    """

    weight: Tensor
    bias: Tensor
    mean: Tensor
    scale: Tensor

    def logits(self, features: Tensor) -> Tensor:
        """``[N, K]`` logits of ``features [N, D]``."""
        return ((features - self.mean) / self.scale) @ self.weight.T + self.bias


@dataclass(frozen=True)
class DFRResult:
    """The retrained last layer, the chosen ``c`` and the selection half's worst-group accuracy of every ``C``."""

    layer: LastLayer
    c: float
    selection: dict[float, float]


class _Features:
    """An evaluator collecting the pooled classifier input, labels and groups of every image."""

    def __init__(self) -> None:
        self.features: list[Tensor] = []
        self.labels: list[Tensor] = []
        self.groups: list[Tensor] = []

    def update(self, model: nn.Module, batch: dict[str, Any], logits: Tensor) -> None:
        self.features.append(model.forward_head(model.forward_features(batch["image"]), pre_logits=True).float().cpu())
        self.labels.append(batch["labels"].argmax(1).cpu())
        self.groups.append(batch["group"].cpu())

    def compute(self) -> dict[str, Any]:
        return {}


def extract_features(model: nn.Module | str | Path, dataset: Any, image_size: int, batch_size: int = 64,
                     device: torch.device | str = "cpu") -> tuple[Tensor, Tensor, Tensor]:
    """``(features [N, D], labels [N], groups [N])`` of ``dataset`` under ``model`` (or a model file) through its
    evaluation transform; the model must expose timm's ``forward_features`` / ``forward_head(pre_logits=True)``
    (every model of the zoo does) and the data groups."""
    if dataset.group_names is None:
        raise UsageError(f"DFR needs group labels on the held-out split, but {getattr(dataset, 'name', 'the data')} "
                         f"split {getattr(dataset, 'split', '?')!r} has none")
    collector = _Features()
    score_model(model, dataset, image_size=image_size, method=None, extra=[collector], batch_size=batch_size,
                device=device)
    if not collector.features:
        raise UsageError("DFR needs at least one held-out image")
    return torch.cat(collector.features), torch.cat(collector.labels), torch.cat(collector.groups)


def halves(n: int, seed: int) -> tuple[Tensor, Tensor]:
    """A random partition of ``0 … n−1`` into the half that trains the last layer and the half that selects ``C``
    (``⌈n/2⌉`` and ``⌊n/2⌋`` indices, each sorted)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return order[: (n + 1) // 2].sort().values, order[(n + 1) // 2:].sort().values


def balanced(indices: Tensor, groups: Tensor, generator: torch.Generator) -> Tensor:
    """A group-balanced subset of ``indices``: from every group present among them, as many (random) indices as the
    smallest such group has."""
    members = [indices[groups[indices] == g] for g in torch.unique(groups[indices]).tolist()]
    smallest = min(len(m) for m in members)
    return torch.cat([m[torch.randperm(len(m), generator=generator)[:smallest]] for m in members])


def fit_logistic(x: Tensor, y: Tensor, num_classes: int, c: float, iterations: int = 500) -> tuple[Tensor, Tensor]:
    """``(weight [K, D], bias [K])`` minimising ``mean CE(x Wᵀ + b, y) + ‖W‖₁ / (c·n)`` over ``x [n, D]``, ``y [n]``
    by proximal gradient descent (step ``1 / L``, ``L = ‖x‖₂² / n + 1/n`` bounding the loss's curvature; the bias is
    not penalised)."""
    x = x.double()
    n, d = x.shape
    step = 1.0 / (torch.linalg.matrix_norm(x, 2) ** 2 / n + 1.0 / n).item()
    shrink = step / (c * n)
    weight = torch.zeros(num_classes, d, dtype=torch.float64)
    bias = torch.zeros(num_classes, dtype=torch.float64)
    target = torch.nn.functional.one_hot(y, num_classes).double()
    for _ in range(iterations):
        residual = (x @ weight.T + bias).softmax(1) - target  # d(mean CE)/d logits · n
        weight = weight - step * residual.T @ x / n
        weight = weight.sign() * (weight.abs() - shrink).clamp(min=0)
        bias = bias - step * residual.mean(0)
    return weight.float(), bias.float()


def group_accuracies(logits: Tensor, labels: Tensor, groups: Tensor, num_groups: int) -> Tensor:
    """``[G]`` accuracy of ``logits [N, K]`` within each group (NaN for a group without images)."""
    correct = (logits.argmax(1) == labels).double()
    totals = torch.bincount(groups, minlength=num_groups).double()
    hits = torch.bincount(groups, weights=correct, minlength=num_groups)
    return torch.where(totals > 0, hits / totals.clamp(min=1), torch.full_like(totals, float("nan")))


def _worst(accuracies: Tensor) -> float:
    return float(accuracies[~accuracies.isnan()].min())


def deep_feature_reweighting(features: Tensor, labels: Tensor, groups: Tensor, num_classes: int, num_groups: int, *,
                             c_grid: tuple[float, ...] = C_GRID, retrains: int = 20, seed: int = 0,
                             iterations: int = 500) -> DFRResult:
    """The DFR^Val_Tr protocol (module docstring) on the held-out ``features [N, D]``, ``labels [N]``,
    ``groups [N]``; ``seed`` fixes the halves and the balanced subsets."""
    mean, scale = features.mean(0), features.std(0).clamp(min=1e-6)
    x = (features - mean) / scale
    generator = torch.Generator().manual_seed(seed)
    train_half, select_half = halves(len(x), seed)
    selection = {}
    for c in c_grid:
        subset = balanced(train_half, groups, generator)
        weight, bias = fit_logistic(x[subset], labels[subset], num_classes, c, iterations)
        layer = LastLayer(weight, bias, torch.zeros_like(mean), torch.ones_like(scale))
        selection[c] = _worst(group_accuracies(layer.logits(x[select_half]), labels[select_half],
                                               groups[select_half], num_groups))
    best = max(c_grid, key=lambda c: selection[c])  # ties: the first, i.e. the weakest penalty of the grid
    everything = torch.arange(len(x))
    fits = [fit_logistic(x[s], labels[s], num_classes, best, iterations)
            for s in (balanced(everything, groups, generator) for _ in range(retrains))]
    weight = torch.stack([w for w, _ in fits]).mean(0)
    bias = torch.stack([b for _, b in fits]).mean(0)
    return DFRResult(LastLayer(weight, bias, mean, scale), best, selection)


def score_last_layer(layer: LastLayer, features: Tensor, labels: Tensor, groups: Tensor,
                     group_names: tuple[str, ...]) -> dict[str, float]:
    """Accuracy, worst-group accuracy and every group's accuracy (``accuracy/<group name>``) of ``layer`` on
    ``features [N, D]`` — the keys :func:`rightreasons.guidance.study.score_on_test` reports."""
    logits = layer.logits(features)
    per_group = group_accuracies(logits, labels, groups, len(group_names))
    return {"accuracy": float((logits.argmax(1) == labels).double().mean()), "worst_group_accuracy": _worst(per_group),
            **{f"accuracy/{name}": float(a) for name, a in zip(group_names, per_group.tolist())}}
