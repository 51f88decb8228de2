"""What a classifier's training adds to the engine's loop (:class:`~rightreasons.engine.Hook`): the B ramp of
B-cosified models and colour explanations of validation images (:func:`explanation_figures`, which a model card's
figures use too)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from ..data import collate
from ..data.io import open_image
from ..engine import Hook, Trainer
from ..explain import explain, prediction_caption, save_explanation
from ..metrics.evaluation import is_multilabel
from ..models.bcosify import BRamp
from .loss import class_probabilities, resolve_classification_loss

__all__ = ["BRampHook", "ExplanationImages", "explanation_figures"]


class BRampHook(Hook):
    """``optim.b_ramp_epochs``: every B-cos unit of a B-cosified model gets the B of the current optimiser step
    (:class:`~rightreasons.models.bcosify.BRamp`), in training, in every validation and in the exported model."""

    def __init__(self, ramp: BRamp) -> None:
        self.ramp = ramp

    @classmethod
    def for_model(cls, model: nn.Module, steps: int) -> BRampHook:
        """A ramp from 1 to the B ``model`` was built with over ``steps`` optimiser steps (a
        :class:`~rightreasons.errors.UsageError` for a model that is not B-cosified)."""
        return cls(BRamp.for_model(model, steps, "optim.b_ramp_epochs"))

    def at_step(self, model: nn.Module, step: int) -> None:
        self.ramp.apply(model, step)


def explanation_figures(model: nn.Module, images: Tensor, batch: Mapping[str, Any], folder: Path,
                        link: Literal["bce", "ce"], classes: Sequence[str] | None = None) -> list[Path]:
    """Colour explanation figures (:func:`~rightreasons.explain.save_explanation`) of a collated ``batch`` whose
    ``images`` are on the model's device, into ``folder/<index>-<id>.png``: each image's first true class explained,
    with that class's boxes, titled with its name, its probability through ``link`` and the prediction."""
    e = explain(model, images, target=batch["labels"].argmax(1).to(images.device))
    probabilities = class_probabilities(e.logits, link)
    paths = []
    for i in range(len(images)):
        target = int(e.target[i])
        boxes = batch["boxes"][i].as_subclass(Tensor)[torch.as_tensor(batch["box_labels"][i]) == target]
        paths.append(save_explanation(folder / f"{i:02d}-{batch['id'][i]}.png", images[i].cpu(), e.weights[i].cpu(),
                                      title=prediction_caption(probabilities[i], target, classes, e.logits[i]),
                                      boxes=boxes.cpu()))
    return paths


class ExplanationImages(Hook):
    """After each validation, colour explanations of the first ``count`` validation images (``eval.num_images``;
    B-cos models) into ``<output_dir>/explanations/step-<step>/``: the image with the boxes of the explained class,
    ``W(x)`` and the contributions, titled with the class name and its probability through the link of the training
    loss (``loss``, the config's ``loss.classification``). The same pictures go to the trackers that take images
    (``explanations/<file name>`` at the validation's step)."""

    def __init__(self, count: int, loss: str) -> None:
        self.count, self.loss = count, loss

    def after_validation(self, trainer: Trainer, step: int, results: dict[str, Any]) -> None:
        val_set = trainer.val_set
        count = min(self.count, len(val_set))
        if not (count and trainer.accelerator.is_main_process):
            return
        model = trainer.bare_model.eval()
        batch = collate([val_set[i] for i in range(count)])
        paths = explanation_figures(model, batch["image"].to(trainer.accelerator.device), batch,
                                    trainer.output_dir / "explanations" / f"step-{step:06d}",
                                    resolve_classification_loss(self.loss, True, is_multilabel(val_set)),
                                    getattr(val_set, "classes", None))
        trainer.log_images({f"explanations/{p.stem}": np.asarray(open_image(p, max_pixels=None)) for p in paths}, step)
        model.train()
