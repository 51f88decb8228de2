"""Evaluation metrics: localisation (EPG, IoU, on-object ratio), classification (multi-label F1/mAP, group and
worst-group accuracy), distillation fidelity (agreement, explanation similarity), Pareto model selection, and the
explanation-quality tests of the B-cos papers (grid pointing game, pixel perturbation).

Every metric is a torchmetrics ``Metric`` (accumulates over batches, synchronises across processes) with a
functional form on single tensors. Evaluations that need attributions take an :data:`AttributionFn`
``fn(model, x, target) -> [N, H, W]``; :func:`attribution_fn` makes one from ``rightreasons.explain``.
"""

from .agreement import Agreement, ExplanationSimilarity, explanation_similarity, top1_agreement
from .attribution_fn import AttributionFn, attribution_fn, run_attribution
from .base import GroupedRate, PerSampleMean
from .classification import GroupAccuracy, MultiLabelClassification, group_accuracy
from .localization_pairs import LocalizationPairs, evaluate_localization, localization_pairs
from .localization import (DEFAULT_IOU_CANDIDATES, ENERGY_EPS, EnergyPointingGame, IoU, OnObjectRatio, energy_ratio,
                           epg, iou, normalize_attributions, on_object_ratio, select_iou_threshold)
from .pareto import DEFAULT_OBJECTIVES, ParetoTracker, dominates, pareto_front, representative
from .perturbation import PerturbationCurves, PixelPerturbation, area_between, perturbation_curves, removal_fractions
from .pointing_game import (GridBatch, GridPointingGame, build_grids, grid_pointing_game, pointing_game_scores,
                            select_confident, smooth_attributions, tile_masks)

__all__ = [
    "DEFAULT_IOU_CANDIDATES", "DEFAULT_OBJECTIVES", "ENERGY_EPS", "Agreement", "AttributionFn", "EnergyPointingGame",
    "ExplanationSimilarity", "GridBatch", "GridPointingGame", "GroupAccuracy", "GroupedRate", "IoU",
    "LocalizationPairs", "MultiLabelClassification", "OnObjectRatio", "ParetoTracker", "PerSampleMean",
    "PerturbationCurves", "PixelPerturbation", "area_between", "attribution_fn", "build_grids",
    "dominates", "energy_ratio", "epg", "evaluate_localization", "explanation_similarity", "grid_pointing_game",
    "group_accuracy", "iou", "localization_pairs", "normalize_attributions", "on_object_ratio", "pareto_front",
    "perturbation_curves", "pointing_game_scores", "removal_fractions", "representative", "run_attribution",
    "select_confident", "select_iou_threshold", "smooth_attributions", "tile_masks", "top1_agreement",
]
