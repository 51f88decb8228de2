"""Scoring a trained classifier's model file on a split of the data its config names (``rightreasons evaluate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..data import load_dataset
from ..metrics.evaluation import score_model
from ..models import capabilities, load_model
from .config import ClassificationConfig

__all__ = ["score_checkpoint"]


def score_checkpoint(config: ClassificationConfig, checkpoint: str | Path, split: str,
                     device: torch.device | str = "cpu") -> dict[str, Any]:
    """Every metric of a model file written by training (``model.safetensors``) on ``split`` of the config's dataset.

    The model is rebuilt from the file (:func:`rightreasons.load_model`); data, resolution and the localisation
    method (:meth:`~rightreasons.classification.config.ClassificationConfig.localization`) come from ``config``; the
    scoring is :func:`rightreasons.metrics.evaluation.score_model`.
    """
    model = load_model(checkpoint)
    data = config.data
    dataset = load_dataset(data.name, data.root, split, **data.options)
    method, layer = config.localization(capabilities(model).bcos)
    results = score_model(model, dataset, image_size=data.image_size, method=method, layer=layer,
                          iou_threshold=config.eval.iou_threshold, batch_size=data.eval_batch_size, device=device,
                          source=str(checkpoint))
    return {"checkpoint": str(checkpoint), "split": split, **results}
