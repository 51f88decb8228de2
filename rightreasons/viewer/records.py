"""Per-image records of the page: what each run predicts and explains on the first images of a split.

For every image, each run explains its first true class (the argmax of the multi-hot labels) with the method and
layer it is shown with (:func:`~rightreasons.viewer.runs.viewed_method`), and that map's EPG against the class's
region — the union of its boxes unless ``regions`` says otherwise (:func:`rightreasons.regions.batch_regions`, void
pixels left out) — is the image's EPG for the run (:func:`~rightreasons.metrics.localization.epg`; ``None`` when the
image has no region of that class). On single-label data this is the EPG that evaluation averages
(:mod:`rightreasons.metrics.localization_pairs`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..classification import class_probabilities, resolve_classification_loss
from ..data import AnnotatedDataset, collate, load_dataset, transforms_for
from ..encoding import to_rgb
from ..errors import UsageError
from ..explain import attribute, get_method
from ..metrics.evaluation import is_multilabel, require_finite_logits
from ..metrics.localization import epg
from ..models import capabilities
from ..models.preprocessing import recorded_crop, recorded_size
from ..regions import batch_regions
from .pictures import explanation_uri, rgb_uri
from .runs import ViewedRun

__all__ = ["image_records", "run_records", "viewed_samples"]


def viewed_samples(run: ViewedRun, split: str, count: int) -> tuple[list[dict[str, Any]], AnnotatedDataset]:
    """The first ``count`` samples of ``split`` of the run's dataset as the run's model sees them (its evaluation
    transform at the size its model file records, else the config's), and the dataset."""
    data = run.config.data
    dataset = load_dataset(data.name, data.root, split, **data.options_for(split))
    if not len(dataset):
        raise UsageError(f"--split {split}: {data.name} has no images in that split")
    dataset.transform = transforms_for(run.model, recorded_size(run.model, data.image_size),
                                       crop_fraction=recorded_crop(run.model))
    return [dataset[i] for i in range(min(count, len(dataset)))], dataset


def image_records(samples: list[dict[str, Any]], encoding: str) -> list[dict[str, Any]]:
    """Per sample what every run shares: ``id``, the ``image`` (PNG data URI), its true ``labels`` (class indices),
    ``group`` (index or ``None``) and ``boxes`` (``[class, x1, y1, x2, y2]`` as fractions of the width and height)."""
    records = []
    for sample in samples:
        image = sample["image"].as_subclass(Tensor)
        height, width = image.shape[-2:]
        scale = torch.tensor([width, height, width, height], dtype=torch.float32)
        boxes = sample["boxes"].as_subclass(Tensor).float() / scale
        records.append({"id": str(sample["id"]), "image": rgb_uri(to_rgb(image[None], encoding)[0]),
                        "labels": sample["labels"].nonzero()[:, 0].tolist(), "group": sample.get("group"),
                        "boxes": [[int(k), *(round(v, 4) for v in box)]
                                  for k, box in zip(sample["box_labels"].tolist(), boxes.tolist())]})
    return records


@torch.no_grad()
def run_records(run: ViewedRun, samples: list[dict[str, Any]], dataset: AnnotatedDataset, method: str, layer: str, *,
                device: torch.device | str = "cpu", regions: str = "boxes") -> list[dict[str, Any]]:
    """Per sample the run's ``predicted`` class, its ``probability`` (through the link of the run's loss),
    ``correct`` (the prediction is a true class), the explained ``target``, the ``explanation`` picture (PNG data
    URI) and its ``epg`` against ``regions`` (module docstring)."""
    model = run.model.to(device).eval()
    bcos = capabilities(model).bcos
    link = resolve_classification_loss(run.config.loss.classification, bcos, is_multilabel(dataset))
    weights_shown = get_method(method).explaining
    records = []
    for start in range(0, len(samples), run.config.data.eval_batch_size):
        batch = collate(samples[start:start + run.config.data.eval_batch_size])
        x, labels = batch["image"].to(device), batch["labels"]
        target = labels.argmax(1)
        result = attribute(model, x, target.to(device), method, layer)
        require_finite_logits(result.logits, str(run.path), batch["id"])
        masks, void = batch_regions(regions, batch, target)
        scores = epg(result.maps.cpu(), masks, void)
        located = masks.flatten(1).any(1) & batch["has_boxes"]
        probabilities = class_probabilities(result.logits, link).cpu()
        for i in range(len(x)):
            predicted = int(probabilities[i].argmax())
            weights = result.weights[i].cpu() if weights_shown and result.weights is not None else None
            records.append({"predicted": predicted, "probability": round(float(probabilities[i, predicted]), 4),
                            "correct": bool(labels[i, predicted] > 0), "target": int(target[i]),
                            "explanation": explanation_uri(x[i].cpu(), result.maps[i].cpu(), weights),
                            "epg": round(float(scores[i]), 4) if located[i] else None})
    return records

