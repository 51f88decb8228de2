"""The metrics a judging can ask for by name (:data:`SUITE`): each scores one batch of explained images per image.

A :class:`Scored` batch holds what every metric reads: the model, its inputs ``[N, C, H, W]``, the explained classes
``[N]``, the maps ``[N, H, W]`` of the judged method and layer, the target class's region ``[N, H, W]`` (its boxes
unless ``judge --regions`` says otherwise) with its void pixels (left out by EPG and IoU) and the
attribution function itself (for the metrics that explain perturbed inputs again). A :class:`SuiteMetric` returns
one ``[N]`` tensor per column it fills; localisation columns are NaN for an image without a box of the explained
class, so that they average over the images that have one. The functions are those of :mod:`rightreasons.metrics`,
with their documented defaults (docs/metrics.md); the few sizes that cannot exceed an image (top-k, subset size) are
capped at its pixel count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..errors import UsageError
from ..metrics import (AttributionFn, complexity, epg, faithfulness_correlation, infidelity, insertion_deletion, iou,
                       model_randomisation, pointing_game, randomisable_layers, relevance_rank_accuracy, sensitivities,
                       sparseness, top_k_intersection)
from ..metrics.perturbation import Output
from .constructed import grid_pointing_game_score, irof_score, road_score

__all__ = ["DEFAULT_METRICS", "SUITE", "Scored", "SuiteMetric", "columns_of", "parse_metrics"]


@dataclass(frozen=True)
class Scored:
    """One batch to score: ``model`` (eval mode), ``images [N, C, H, W]``, ``targets [N]``, ``maps [N, H, W]``,
    ``masks [N, H, W]`` bool (the target class's region: :func:`rightreasons.regions.batch_regions`),
    ``attribution`` (what made ``maps``), ``output`` (the score perturbation metrics track), a seeded CPU
    ``generator`` and the region's ``void [N, H, W]`` bool (``None``: none)."""

    model: nn.Module
    images: Tensor
    targets: Tensor
    maps: Tensor
    masks: Tensor
    attribution: AttributionFn
    output: Output
    generator: torch.Generator
    void: Tensor | None = None

    @property
    def pixels(self) -> int:
        return self.maps.shape[-2] * self.maps.shape[-1]


@dataclass(frozen=True)
class SuiteMetric:
    """A metric of the suite: the ``columns`` it fills (``higher[i]``: is a higher value of column ``i`` better),
    whether it is ``cheap`` (in the default set) and its ``score`` of a batch, ``{column: [N]}``."""

    columns: tuple[str, ...]
    higher: tuple[bool, ...]
    cheap: bool
    score: Callable[[Scored], dict[str, Tensor]]


def _localisation(name: str, fn: Callable[..., Tensor], void: bool = False) -> Callable[[Scored], dict[str, Tensor]]:
    """``fn(maps, masks)`` on the images with a region of their class (``fn(maps, masks, void=...)`` for a metric
    that leaves out void pixels, ``void``); NaN for the others."""

    def score(b: Scored) -> dict[str, Tensor]:
        present = b.masks.flatten(1).any(1)
        out = torch.full(present.shape, torch.nan, device=b.maps.device)
        if present.any():
            extra = {"void": b.void[present]} if void and b.void is not None else {}
            out[present] = fn(b.maps[present], b.masks[present], **extra).to(out.dtype)
        return {name: out}

    return score


def _insertion_deletion(b: Scored) -> dict[str, Tensor]:
    curves = insertion_deletion(b.model, b.images, b.targets, b.maps, output=b.output, batch_size=len(b.images))
    return {"insertion": curves.insertion_auc, "deletion": curves.deletion_auc}


def _sensitivity(b: Scored) -> dict[str, Tensor]:
    changes = sensitivities(b.model, b.images, b.targets, b.attribution, generator=b.generator,
                            batch_size=len(b.images))
    return {"max_sensitivity": changes.amax(1), "avg_sensitivity": changes.mean(1)}


def _randomisation(b: Scored) -> dict[str, Tensor]:
    layers = randomisable_layers(b.model)
    _, correlations = model_randomisation(b.model, b.images, b.targets, b.attribution, layers,
                                          seed=int(torch.randint(2**31, (), generator=b.generator)),
                                          batch_size=len(b.images))
    return {"randomisation": correlations[:, -1]}


SUITE: dict[str, SuiteMetric] = {
    "epg": SuiteMetric(("epg",), (True,), True, _localisation("epg", epg, void=True)),
    "iou": SuiteMetric(("iou",), (True,), True, _localisation("iou", iou, void=True)),
    "pointing_game": SuiteMetric(("pointing_game",), (True,), True, _localisation("pointing_game", pointing_game)),
    "relevance_rank": SuiteMetric(("relevance_rank",), (True,), True,
                                  _localisation("relevance_rank", relevance_rank_accuracy)),
    "top_k": SuiteMetric(("top_k",), (True,), True, lambda b: _localisation(
        "top_k", lambda maps, masks: top_k_intersection(maps, masks, min(1000, b.pixels)))(b)),
    "sparseness": SuiteMetric(("sparseness",), (True,), True, lambda b: {"sparseness": sparseness(b.maps)}),
    "complexity": SuiteMetric(("complexity",), (False,), True, lambda b: {"complexity": complexity(b.maps)}),
    "insertion_deletion": SuiteMetric(("insertion", "deletion"), (True, False), False, _insertion_deletion),
    "faithfulness_correlation": SuiteMetric(("faithfulness_correlation",), (True,), False, lambda b: {
        "faithfulness_correlation": faithfulness_correlation(
            b.model, b.images, b.targets, b.maps, subset_size=min(224, b.pixels), generator=b.generator,
            batch_size=len(b.images))}),
    "sensitivity": SuiteMetric(("max_sensitivity", "avg_sensitivity"), (False, False), False, _sensitivity),
    "infidelity": SuiteMetric(("infidelity",), (False,), False, lambda b: {"infidelity": infidelity(
        b.model, b.images, b.targets, b.maps, generator=b.generator, batch_size=len(b.images))}),
    "randomisation": SuiteMetric(("randomisation",), (False,), False, _randomisation),
    "road": SuiteMetric(("road_morf", "road_lerf"), (False, True), False, road_score),
    "irof": SuiteMetric(("irof",), (True,), False, irof_score),
    "grid_pointing_game": SuiteMetric(("grid_pointing_game",), (True,), False, grid_pointing_game_score),
}
"""Name → metric. Localisation: ``epg``, ``iou`` (min-max normalised, threshold 0.5), ``pointing_game`` (15 px),
``relevance_rank``, ``top_k`` (k = 1000); complexity: ``sparseness``, ``complexity``; faithfulness (opt-in):
``insertion_deletion`` (AUCs), ``faithfulness_correlation``; robustness (opt-in): ``sensitivity`` (max and avg),
``infidelity``; sanity (opt-in): ``randomisation`` (Spearman correlation of the map after randomising every
parametrised layer, cascade); built from the batch (opt-in, :mod:`.constructed`): ``road`` (MoRF and LeRF areas),
``irof`` (10 × 10 grid superpixels), ``grid_pointing_game`` (2 × 2 grids of the batch's confident images)."""
DEFAULT_METRICS: tuple[str, ...] = tuple(name for name, metric in SUITE.items() if metric.cheap)
"""The cheap metrics, judged unless others are named: one attribution per image and no extra forward pass."""


def parse_metrics(text: str | None, what: str = "--metrics") -> tuple[str, ...]:
    """The metric names of a comma-separated list (``None``: :data:`DEFAULT_METRICS`); an unknown or repeated name
    is a :class:`~rightreasons.errors.UsageError` naming ``what``."""
    if text is None:
        return DEFAULT_METRICS
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in SUITE]
    if not names or unknown or len(set(names)) != len(names):
        problem = f"unknown {', '.join(unknown)}" if unknown else "a name given twice" if names else "no name"
        raise UsageError(f"{what} {text}: {problem}; expected a comma-separated list of {', '.join(SUITE)}")
    return names


def columns_of(metrics: tuple[str, ...]) -> dict[str, bool]:
    """Column → is higher better, for ``metrics`` in order."""
    return {c: h for name in metrics for c, h in zip(SUITE[name].columns, SUITE[name].higher)}
