"""JTT's error set (Liu et al. 2021, "Just Train Twice"): the training images that a first-stage ERM model
misclassifies. The second stage (``robustness.method: upweight``) weights their loss by λ_up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..metrics.evaluation import score_model

__all__ = ["MisclassifiedIds", "error_set"]


class MisclassifiedIds:
    """An evaluator (:class:`~rightreasons.metrics.evaluation.Evaluator`) collecting the ids of the images whose
    top-scoring class is not their label (single-label data)."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def update(self, model: nn.Module, batch: dict[str, Any], logits: Tensor) -> None:
        wrong = (logits.argmax(1) != batch["labels"].argmax(1)).cpu()
        self.ids.extend(i for i, w in zip(batch["id"], wrong.tolist()) if w)

    def compute(self) -> dict[str, Any]:
        return {"misclassified": list(self.ids)}


def error_set(model: nn.Module | str | Path, dataset: Any, image_size: int, batch_size: int = 64,
              device: torch.device | str = "cpu") -> set[str]:
    """The ids of ``dataset``'s images that ``model`` (or a model file) misclassifies, each seen once through the
    evaluation transform at ``image_size`` (no augmentation, so the set does not depend on a seed or the processes)."""
    collector = MisclassifiedIds()
    score_model(model, dataset, image_size=image_size, method=None, extra=[collector], batch_size=batch_size,
                device=device)
    return set(collector.ids)
