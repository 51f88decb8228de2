"""Training a classifier of the zoo as a task of the engine (``rightreasons train``), and what every task that trains
a classifier shares: :class:`ClassificationTask`.

It fine-tunes ``config.model`` on ``config.data`` with the classification loss
(:func:`~rightreasons.classification.loss.classification_loss`, ``loss.classification``). Guidance
(:class:`rightreasons.guidance.GuidanceTask`) and distillation (:class:`rightreasons.distill.DistillationTask`) derive
from it and change the objective; the rest is shared:

* the model: a registry name with weights from ``model.pretrained`` or ``model.checkpoint`` (a file or a finished
  run's directory, :func:`rightreasons.models.model_file`), synchronised BatchNorm on several processes
  (``model.sync_bn``), activation checkpointing of its stages (``model.activation_checkpointing``), its input
  encoding, AGC for B-cos models (``optim.agc: auto``), the B ramp of B-cosified models (``optim.b_ramp_epochs``);
* validation: accuracy or F1 (``score``), group accuracies and — unless ``eval.localization`` is off or the evaluated
  images carry no boxes — EPG and IoU of an attribution method (:meth:`ClassificationConfig.localization`); colour
  explanations of a few validation images after each validation (B-cos models, ``eval.num_images``);
* the exported model file, with the class names of the data.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import torch
from torch import Tensor, nn

from ..bcos.sync import convert_sync_batchnorm
from ..data import load_dataset
from ..engine import Hook, Step, Task, Trainer, register_task
from ..errors import ConfigError, UsageError
from ..metrics.evaluation import Evaluator, classifier_evaluators, has_boxes, is_multilabel
from ..models import capabilities, create_model, model_file, resolve_architecture, save_model
from ..models.checkpointing import checkpoint_stages
from ..models.preprocessing import InputConfig
from .config import ClassificationConfig
from .hooks import BRampHook, ExplanationImages
from .loss import classification_loss, resolve_classification_loss

__all__ = ["ClassificationTask"]

logger = logging.getLogger(__name__)


class ClassificationTask(Task):
    """Fine-tune ``config.model`` on ``config.data`` with the classification loss."""

    config_class = ClassificationConfig
    config: ClassificationConfig

    def __init__(self, config: ClassificationConfig) -> None:
        super().__init__(config)
        self.loss_kind: Literal["bce", "ce"] = "bce"
        self.model: nn.Module | None = None
        self.val_set: Any = None
        checkpoint = model_file(config.model.checkpoint)  # a missing starting point fails before any work starts
        if config.model.activation_checkpointing:  # so does a model whose stages cannot be checkpointed
            name, kwargs = resolve_architecture(config.model.name, config.model.kwargs, checkpoint)
            with torch.device("meta"):
                self.checkpointed(create_model(name, **kwargs))

    # ------------------------------------------------------------------ data and model
    def build_datasets(self) -> tuple[Any, Any]:
        """Training set (limited annotations drawn with the run's seed) and validation set; sets the Pareto
        objectives (:meth:`validation_objectives`)."""
        config, data = self.config, self.config.data
        train_set = load_dataset(data.name, data.root, data.train_split, annotated_fraction=data.annotated_fraction,
                                 annotation_seed=config.seed, **data.options_for(data.train_split))
        self.val_set = load_dataset(data.name, data.root, data.val_split, **data.options_for(data.val_split))
        self.objectives = self.validation_objectives(self.val_set)
        return train_set, self.val_set

    def validation_objectives(self, val_set: Any) -> tuple[str, ...]:
        """What the run's Pareto front is taken over: ``score``, plus EPG and IoU when ``eval.localization`` is on
        and ``val_set`` has boxes (otherwise validation simply reports no localisation metrics, and says so once)."""
        if not self.config.eval.localization:
            return ("score",)
        if not has_boxes(val_set):
            logger.info("no image of the validation split %r of %s has boxes: validation reports no localisation "
                        "metrics (EPG, IoU)", getattr(val_set, "split", "?"), getattr(val_set, "name", "the data"))
            return ("score",)
        return ("score", "epg", "iou")

    def output_classes(self, train_set: Any) -> int:
        """How many classes the model predicts: those of the training set."""
        return train_set.num_classes

    def build_model(self, train_set: Any) -> nn.Module:
        """``config.model`` with :meth:`output_classes` outputs, from the weights ``model.checkpoint`` names (a file or
        a run directory); resolves the classification loss it trains with."""
        m = self.config.model
        checkpoint = model_file(m.checkpoint)
        name, kwargs = resolve_architecture(m.name, m.kwargs, checkpoint)
        self.model = create_model(name, pretrained=m.pretrained, checkpoint=checkpoint,
                                  **{**kwargs, "num_classes": self.output_classes(train_set)})
        self.checkpointed(self.model)
        self.loss_kind = resolve_classification_loss(self.config.loss.classification, capabilities(self.model).bcos,
                                                     is_multilabel(train_set))
        return self.model

    def checkpointed(self, model: nn.Module) -> nn.Module:
        """``model`` with the stages that ``model.activation_checkpointing`` names checkpointed
        (:func:`~rightreasons.models.checkpointing.checkpoint_stages`)."""
        stages = self.config.model.activation_checkpointing
        if stages:
            try:
                checkpoint_stages(model, None if stages is True else stages)
            except UsageError as e:
                raise ConfigError(f"model.activation_checkpointing: {e}") from None
        return model

    def distribute(self, model: nn.Module, processes: int) -> nn.Module:
        """Synchronised BatchNorm over the processes (``model.sync_bn``, the default)."""
        return convert_sync_batchnorm(model) if self.config.model.sync_bn else model

    def input_encoding(self, model: nn.Module) -> str:
        return capabilities(model).encoding

    def input_config(self, encoding: str) -> InputConfig:
        """The input of a model trained here, which its model file records (:mod:`rightreasons.models.preprocessing`):
        the view of :meth:`eval_transform`, the whole image at ``data.image_size``."""
        return InputConfig(encoding, self.config.data.image_size, crop_pct=1.0)

    def default_agc(self, model: nn.Module) -> float | None:
        """0.01 for B-cos models (the B-cos recipe), off otherwise."""
        return 0.01 if capabilities(model).bcos else None

    def hooks(self, trainer: Trainer) -> list[Hook]:
        """The B ramp (``optim.b_ramp_epochs``) and the explanation images of validation (``eval.num_images``)."""
        hooks: list[Hook] = []
        if self.config.optim.b_ramp_epochs:
            hooks.append(BRampHook.for_model(trainer.bare_model,
                                             round(self.config.optim.b_ramp_epochs * trainer.steps_per_epoch)))
        if self.config.eval.num_images and capabilities(trainer.bare_model).bcos:
            hooks.append(ExplanationImages(self.config.eval.num_images, self.config.loss.classification))
        return hooks

    # ------------------------------------------------------------------ objective and scores
    def losses(self, model: nn.Module, batch: dict[str, Any], step: Step) -> tuple[dict[str, Tensor], Tensor]:
        """``{"classification"}`` and the loss itself."""
        classification = self.classification_loss(model(batch["image"]), batch["labels"])
        return {"classification": classification}, classification

    def classification_loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        """The configured classification loss of ``logits [N, K]`` against multi-hot ``labels [N, K]``."""
        return classification_loss(logits.float(), labels, self.loss_kind, self.config.loss.uniform_off_labels)

    def evaluators(self, dataset: Any) -> list[Evaluator]:
        """Classification (accuracy or F1, groups) and, unless switched off or ``dataset`` has no boxes,
        localisation of the model on ``dataset``, as :meth:`ClassificationConfig.localization` decides, against
        ``eval.regions``."""
        method, layer = self.config.localization(capabilities(self.model).bcos)
        e = self.config.eval
        return classifier_evaluators(dataset, method if has_boxes(dataset) else None, layer,
                                     iou_threshold=e.iou_threshold, batch_size=self.config.data.eval_batch_size,
                                     regions=e.regions, point_radius=e.point_radius)

    def save_model(self, model: nn.Module, path: Any, metadata: dict[str, str]) -> None:
        """Our model file (:func:`rightreasons.save_model`), with the class names of the validation data and the
        input it was validated on (:meth:`input_config`)."""
        save_model(model, path, metadata=metadata, classes=getattr(self.val_set, "classes", None),
                   input_config=self.input_config(self.input_encoding(model)))


register_task("train", ClassificationTask)
