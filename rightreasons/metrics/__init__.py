"""Evaluation metrics: localisation (EPG, IoU, on-object ratio), classification (multi-label F1/mAP, group and
worst-group accuracy), distillation fidelity (agreement, explanation similarity), Pareto model selection, the
explanation-quality tests of the B-cos papers (grid pointing game, pixel perturbation) and the explanation-quality
suite of docs/metrics.md: pointing game with a tolerance, relevance rank accuracy, top-k intersection, sparseness,
complexity, insertion/deletion, ROAD, IROF, faithfulness correlation, max/avg sensitivity, infidelity, model and
label randomisation.

Every metric is a torchmetrics ``Metric`` (accumulates over batches, synchronises across processes) with a
functional form on single tensors. Evaluations that need attributions take an :data:`AttributionFn`
``fn(model, x, target) -> [N, H, W]``; :func:`attribution_fn` makes one from ``rightreasons.explain``.
"""

from .agreement import Agreement, ExplanationSimilarity, explanation_similarity, top1_agreement
from .attribution_fn import AttributionFn, attribution_fn, run_attribution
from .base import GroupedRate, PerSampleMean
from .classification import GroupAccuracy, MultiLabelClassification, group_accuracy
from .complexity import Complexity, Sparseness, complexity, sparseness
from .correlation import average_ranks, pearson, spearman
from .faithfulness_correlation import FaithfulnessCorrelation, faithfulness_correlation, random_subsets
from .insertion_deletion import InsertionDeletion, InsertionDeletionCurves, blurred, insertion_deletion
from .localization_pairs import LocalizationPairs, evaluate_localization, localization_pairs
from .localization import (DEFAULT_IOU_CANDIDATES, ENERGY_EPS, EnergyPointingGame, IoU, OnObjectRatio, energy_ratio,
                           epg, iou, normalize_attributions, on_object_ratio, select_iou_threshold)
from .pareto import DEFAULT_OBJECTIVES, ParetoTracker, dominates, pareto_front, representative
from .perturbation import (PerturbationCurves, PixelPerturbation, area_between, perturbation_curves, pixel_ranks,
                           removal_fractions, replacement_curve, target_scores)
from .pointing_game import (GridBatch, GridPointingGame, build_grids, grid_pointing_game, pointing_game_scores,
                            select_confident, smooth_attributions, tile_masks)
from .irof import IROF, IROFCurves, grid_segments, irof, segment_ranks, slic_segments
from .randomisation import (LabelRandomisation, ModelRandomisation, label_randomisation, model_randomisation,
                            randomisable_layers)
from .road import ROAD, ROADCurves, noisy_linear_imputation, road
from .relevance_rank import RelevanceRankAccuracy, TopKIntersection, relevance_rank_accuracy, top_k_intersection
from .robustness import Infidelity, Sensitivity, infidelity, sensitivities
from .tolerance_pointing import PointingGame, pointing_game

__all__ = [
    "Agreement", "AttributionFn", "Complexity", "DEFAULT_IOU_CANDIDATES", "DEFAULT_OBJECTIVES", "ENERGY_EPS",
    "EnergyPointingGame", "ExplanationSimilarity", "FaithfulnessCorrelation", "GridBatch", "GridPointingGame",
    "GroupAccuracy", "GroupedRate", "IROF", "IROFCurves", "Infidelity", "InsertionDeletion", "InsertionDeletionCurves", "IoU",
    "LabelRandomisation", "LocalizationPairs", "ModelRandomisation", "MultiLabelClassification", "OnObjectRatio", "ParetoTracker",
    "PerSampleMean", "PerturbationCurves", "PixelPerturbation", "PointingGame", "ROAD", "ROADCurves", "RelevanceRankAccuracy",
    "Sensitivity", "Sparseness", "TopKIntersection", "area_between", "attribution_fn", "average_ranks", "blurred",
    "build_grids", "complexity", "dominates", "energy_ratio", "epg", "evaluate_localization",
    "explanation_similarity", "faithfulness_correlation", "grid_pointing_game", "grid_segments", "group_accuracy", "infidelity",
    "insertion_deletion", "iou", "irof", "label_randomisation", "localization_pairs", "model_randomisation", "noisy_linear_imputation", "normalize_attributions",
    "on_object_ratio", "pareto_front", "pearson", "perturbation_curves", "pixel_ranks", "pointing_game",
    "pointing_game_scores", "random_subsets", "randomisable_layers", "relevance_rank_accuracy", "removal_fractions",
    "replacement_curve", "representative", "road", "run_attribution", "segment_ranks", "select_confident", "select_iou_threshold",
    "sensitivities", "slic_segments", "smooth_attributions", "sparseness", "spearman", "target_scores", "tile_masks",
    "top1_agreement", "top_k_intersection",
]
