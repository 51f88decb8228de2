"""Scoring a trained classifier on a split of the data its config names (``rightreasons evaluate``, the sweep's
report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data import AnnotatedDataset, load_dataset
from ..engine.artifacts import RunArtifact, locate_artifact
from ..metrics.evaluation import score_model
from ..models import capabilities, create_model, load_model, model_file, resolve_architecture
from ..models.preprocessing import recorded_size
from ..models.weights import logit_arguments
from .config import ClassificationConfig

__all__ = ["score_checkpoint", "trained_architecture", "trained_model"]


def trained_architecture(config: ClassificationConfig, dataset: AnnotatedDataset) -> tuple[str, dict[str, Any]]:
    """The registry name and constructor arguments of the model ``config`` trained on ``dataset`` — what a checkpoint,
    whose weights file records neither, is rebuilt as: ``config.model`` (or the architecture its starting model file
    records) with ``dataset``'s number of classes and the logit bias these give, made explicit (the file does not
    record it either; :func:`~rightreasons.models.weights.logit_arguments`)."""
    m = config.model
    name, kwargs = resolve_architecture(m.name, m.kwargs, model_file(m.checkpoint))
    kwargs = {**kwargs, "num_classes": dataset.num_classes}
    if kwargs.get("logit_bias") is None:
        with torch.device("meta"):
            kwargs.update(logit_arguments(create_model(name, **kwargs)))
    return name, kwargs


def trained_model(config: ClassificationConfig, artifact: RunArtifact, dataset: AnnotatedDataset) -> nn.Module:
    """The model of ``artifact``: rebuilt from its model file, or — for a checkpoint, whose weights file does not
    record the architecture — as :func:`trained_architecture` with the checkpoint's weights and ``dataset``'s
    classes."""
    if artifact.architecture_in_file:
        return load_model(artifact.weights)
    name, kwargs = trained_architecture(config, dataset)
    model = create_model(name, checkpoint=str(artifact.weights), **kwargs)
    model.classes = dataset.classes
    return model


def score_checkpoint(config: ClassificationConfig, checkpoint: str | Path, split: str,
                     device: torch.device | str = "cpu", image_size: int | None = None,
                     regions: str | None = None) -> dict[str, Any]:
    """Every metric of a trained model on ``split`` of the config's dataset.

    ``checkpoint`` is any artefact of a run (:func:`~rightreasons.engine.artifacts.locate_artifact`): its directory,
    its model file, one of its checkpoint directories or a model directory. Data and the localisation method
    (:meth:`~rightreasons.classification.config.ClassificationConfig.localization`) come from ``config``; the
    resolution is ``image_size``, else the one the model file records (:mod:`rightreasons.models.preprocessing`),
    else ``config.data.image_size``; EPG and IoU score against ``regions``, else ``config.eval.regions`` (boxes by
    default, whatever the run was guided on); the scoring is :func:`rightreasons.metrics.evaluation.score_model`.
    """
    artifact = locate_artifact(checkpoint)
    data = config.data
    dataset = load_dataset(data.name, data.root, split, **data.options_for(split))
    model = trained_model(config, artifact, dataset)
    method, layer = config.localization(capabilities(model).bcos)
    size = image_size or recorded_size(model, data.image_size)
    results = score_model(model, dataset, image_size=size, method=method, layer=layer,
                          iou_threshold=config.eval.iou_threshold, batch_size=data.eval_batch_size, device=device,
                          source=str(checkpoint), regions=regions or config.eval.regions,
                          point_radius=config.eval.point_radius)
    return {"checkpoint": str(checkpoint), "split": split, "image_size": size, **results}
