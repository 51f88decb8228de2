"""Box guidance as a task of the engine (``rightreasons guide``): :class:`GuidanceTask` fine-tunes a classifier with

    L = L_class + λ · L_loc

where ``L_loc`` is the localisation loss of :class:`~rightreasons.guidance.objective.GuidanceObjective` on the
annotated images of each batch (``guidance`` section of :class:`~rightreasons.guidance.config.GuideConfig`). Data,
model, validation and export are those of every classifier (:class:`~rightreasons.classification.ClassificationTask`);
validation scores EPG and IoU with the guided method and layer by default, against ``eval.regions`` (boxes by
default, whatever ``guidance.regions`` trains on).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from ..classification import ClassificationTask
from ..engine import Step, register_task
from ..engine.data import EpochSampler
from ..errors import ConfigError, TrainingError
from ..metrics.evaluation import has_boxes
from .config import GuideConfig
from .objective import GuidanceObjective

__all__ = ["GuidanceTask"]


class GuidanceTask(ClassificationTask):
    """Fine-tune ``config.model`` on ``config.data`` with the classification loss and box guidance."""

    config_class = GuideConfig
    config: GuideConfig

    def __init__(self, config: GuideConfig) -> None:
        if config.selection.grid:  # a run of one setting: the candidates are trained by guidance.choosing
            raise ConfigError(f"selection.grid={config.selection.grid}: this config chooses among candidate settings, "
                              "which `rightreasons guide` trains (guidance.choosing.run_selection), not one training")
        super().__init__(config)
        g = config.guidance
        self.guidance = GuidanceObjective(g.method, g.layer, g.loss, g.dilation, "sum", g.intgrad_steps, g.explain,
                                          config.compile, g.regions, g.point_radius)

    def build_datasets(self) -> tuple[Any, Any]:
        """The classifier's datasets; the training set must hold annotated images."""
        train_set, val_set = super().build_datasets()
        if not has_boxes(train_set):
            data = self.config.data
            raise TrainingError(f"guidance needs annotated images, but none of the {len(train_set)} training "
                                f"images of {data.name} has boxes (data.annotated_fraction={data.annotated_fraction})")
        return train_set, val_set

    def train_sampler(self, train_set: Any) -> EpochSampler:
        """A seeded permutation per epoch; with ``guidance.annotated_per_batch = k``, batches of ``k`` annotated and
        ``batch_size − k`` other images (:class:`~rightreasons.engine.data.EpochSampler`)."""
        k = self.config.guidance.annotated_per_batch
        if not k:
            return super().train_sampler(train_set)
        try:
            return EpochSampler(len(train_set), self.config.seed, annotated=train_set.annotated, per_batch=k,
                                batch_size=self.config.data.batch_size)
        except ValueError as e:
            raise ConfigError(f"guidance.annotated_per_batch={k} (data.batch_size={self.config.data.batch_size}): "
                              f"{e}") from None

    def losses(self, model: nn.Module, batch: dict[str, Any], step: Step) -> tuple[dict[str, Tensor], Tensor]:
        """``{"classification", "localization"}`` and ``L_class + λ · L_loc``."""
        host = batch.get("host", batch)  # what the objective decides on the host: never a wait for the device
        out = self.guidance(model, batch["image"], host["labels"], host["boxes"], host["box_labels"],
                            host["has_boxes"], step.generator, grad_scale=step.loss_scale,
                            segmentations=host.get("mask"), points=host.get("points"),
                            point_labels=host.get("point_labels"))
        # DDP averages gradients over processes: scale the local sum so that the result is the global sum
        # (reduction "sum") or the mean over the annotated images of the global batch ("mean_annotated").
        localization = out.loss * step.world_size
        if self.config.guidance.reduction == "mean_annotated":
            localization = localization / step.sum_across_processes(out.annotated.sum().float()).clamp(min=1)
        classification = self.classification_loss(out.logits, batch["labels"])
        total = classification + self.config.guidance.weight * localization
        return {"classification": classification, "localization": localization}, total


register_task("guide", GuidanceTask)
