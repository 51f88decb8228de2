"""Validation of a classifier: classification metrics, group accuracies and localisation (EPG, IoU).

Each process scores its own shard of the evaluation set (:func:`rightreasons.engine.data.shard_indices`) and the
torchmetrics states are summed across processes in ``compute()``, so a multi-process evaluation scores every image
exactly once. Localisation is evaluated for every ground-truth class of every image with boxes.

The selection score is ``f1`` (micro F1) on multi-label data and ``accuracy`` on single-label data; it is always also
reported as ``score`` so that the Pareto tracker has one name for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from ..data import collate
from ..metrics import EnergyPointingGame, GroupAccuracy, IoU, MultiLabelClassification, attribution_fn
from ..metrics.evaluate import evaluate_localization
from .data import shard_indices

__all__ = ["evaluate_checkpoint", "evaluate_classifier", "is_multilabel", "localization_setting"]


def is_multilabel(dataset: Any) -> bool:
    """Whether any sample of the dataset has more than one positive label."""
    return bool(dataset.positive_labels.sum(1).max() > 1)


def _to_float(value: torch.Tensor) -> float | list[float]:
    value = value.detach().cpu()
    return value.item() if value.numel() == 1 else value.tolist()


@torch.no_grad()
def evaluate_classifier(model: nn.Module, dataset: Dataset, *, batch_size: int, device: torch.device,
                        rank: int = 0, world_size: int = 1, method: str | None = "bcos", layer: str = "input",
                        iou_threshold: float = 0.5, group_names: Sequence[str] | None = None,
                        num_workers: int = 0) -> dict[str, Any]:
    """Evaluate ``model`` (put in eval mode here; the caller restores train mode) on ``dataset``.

    Returns ``accuracy`` or ``f1``/``map``/``f1_per_class``, ``score``, per-group and worst-group accuracy when the
    dataset has groups, and ``epg``/``iou`` (attribution ``method`` at ``layer``; ``None`` skips localisation).
    """
    model.eval()
    num_classes = dataset.num_classes
    multilabel = is_multilabel(dataset)
    shard = Subset(dataset, shard_indices(len(dataset), rank, world_size))
    loader = DataLoader(shard, batch_size=batch_size, shuffle=False, collate_fn=collate, num_workers=num_workers)
    classification = (MultiLabelClassification(num_classes) if multilabel else
                      GroupAccuracy(len(group_names) if group_names else 1, group_names)).to(device)
    localization = [EnergyPointingGame().to(device), IoU(threshold=iou_threshold).to(device)] if method else []
    explain = attribution_fn(method, layer) if method else None
    pairs = 0
    for batch in loader:
        images, labels = batch["image"].to(device), batch["labels"].to(device)
        logits = model(images)
        if multilabel:
            classification.update(logits.float(), labels)
        else:
            groups = batch["group"].to(device) if "group" in batch and group_names else None
            classification.update(logits.float(), labels.argmax(1), groups)
        if explain is not None:
            boxes = [b.as_subclass(torch.Tensor).to(device) for b in batch["boxes"]]
            box_labels = [b.to(device) for b in batch["box_labels"]]
            pairs += evaluate_localization(model, images, labels, boxes, box_labels, explain, localization,
                                           batch_size=batch_size)
    results = {k: _to_float(v) for k, v in classification.compute().items()}
    results["score"] = results["f1"] if multilabel else results["accuracy"]
    counted = torch.tensor(float(pairs), device=device)
    if world_size > 1:
        torch.distributed.all_reduce(counted)
    if localization and counted.item() > 0:
        results["epg"], results["iou"] = (_to_float(m.compute()) for m in localization)
    return results


def localization_setting(config: Any, bcos: bool) -> tuple[str | None, str]:
    """Attribution method and layer that score EPG/IoU: ``eval.method``/``eval.layer`` when set, else the guidance
    method and layer of a guided run, else B-cos contributions (B-cos models) or GradCAM at the last stage.
    The method is ``None`` when ``eval.localization`` is off."""
    guided = config.guidance.enabled
    method = config.eval.method or (config.guidance.method if guided else ("bcos" if bcos else "gradcam"))
    layer = config.eval.layer or (config.guidance.layer if guided else
                                  ("input" if method in ("bcos", "ixg", "intgrad") else "final"))
    return (method if config.eval.localization else None), layer


def evaluate_checkpoint(config: Any, checkpoint: str | Path, split: str) -> dict[str, Any]:
    """Evaluate a model file written by training (``model.safetensors``) on ``split`` of the config's dataset.

    The model is rebuilt from the file (:func:`rightreasons.load_model`); data, resolution and the localisation
    method come from ``config`` (a :class:`~rightreasons.engine.schema.TrainConfig`).
    """
    from ..checkpoints import load_model
    from ..data import eval_transform, load_dataset
    from ..registry import get_model_spec

    model = load_model(checkpoint)
    bcos = get_model_spec(model.model_args["name"]).bcos
    data = config.data
    dataset = load_dataset(data.name, data.root, split, **data.options,
                           transform=eval_transform(data.image_size, encoding="bcos" if bcos else "normalize",
                                                    crop_fraction=1.0))
    method, layer = localization_setting(config, bcos)
    results = evaluate_classifier(model, dataset, batch_size=data.eval_batch_size, device=torch.device("cpu"),
                                  method=method, layer=layer,
                                  iou_threshold=config.eval.iou_threshold,
                                  group_names=dataset.group_names)
    return {"checkpoint": str(checkpoint), "split": split, "images": len(dataset), "method": method, "layer": layer,
            **results}
