"""Classification and box guidance as a task of the engine: ``rightreasons train`` / ``guide`` / ``evaluate``.

:class:`ClassificationTask` trains a registered model on ``config.data`` with the classification loss and, when
``guidance.enabled``, the localisation term of :class:`~rightreasons.guidance.GuidanceObjective`::

    L = L_class + λ · L_loc

The classification loss is :func:`rightreasons.classification.classification_loss` (``loss.classification``).

Validation scores accuracy or F1 (``score``), group accuracies and — unless ``eval.localization`` is off or the
evaluated images carry no boxes (:func:`has_boxes`) — EPG and IoU of an attribution method
(:func:`localization_setting`).

``model.checkpoint`` may name a weights file or the directory of a finished run (:func:`run_model_file`), so that the
configs of a pipeline refer to each other's outputs by run directory.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn

from ..classification import classification_loss, resolve_classification_loss
from ..data import eval_transform, load_dataset
from ..engine import Step, Task, TrainConfig
from ..engine.data import EpochSampler
from ..errors import CheckpointError, ConfigError, TrainingError
from ..evaluation import Evaluator, classifier_evaluators, evaluate, is_multilabel
from ..explain import get_method
from ..guidance import GuidanceObjective
from ..hub import capabilities, create_model, load_model

__all__ = ["ClassificationTask", "build_model", "evaluate_checkpoint", "has_boxes", "localization_setting",
           "run_model_file", "supervised_evaluators", "validation_objectives"]

logger = logging.getLogger(__name__)

RUN_MODEL_FILE = "model.safetensors"
"""The model file a finished run writes into its directory (:meth:`rightreasons.engine.Trainer.finish`)."""


def run_model_file(path: str | Path | None, key: str = "model.checkpoint") -> str | None:
    """The weights file config ``key`` names: ``path`` itself, or for the directory of a run its final
    ``model.safetensors``. A path that does not exist, or a run directory without a model file (the run has not
    finished), is a :class:`CheckpointError` that says what to run first."""
    if path is None or Path(path).is_file():
        return None if path is None else str(path)
    if not Path(path).exists():
        raise CheckpointError(f"{key}={path}: no such weights file or run directory; when it names the run of "
                              "another config (the shipped guided configs start from their dataset's baseline run, "
                              "written by configs/guidance/<dataset>_baseline.yaml), run that training first")
    model_file = Path(path) / RUN_MODEL_FILE
    if not model_file.is_file():
        state = "it holds checkpoints but has not finished (continue it with --resume)" \
            if (Path(path) / "checkpoints").is_dir() else "it holds no finished run"
        raise CheckpointError(f"{key}={path}: a run directory without {RUN_MODEL_FILE}: {state}; run the training "
                              f"that writes to {path} first, or name a weights file")
    return str(model_file)


def build_model(config: Any, num_classes: int) -> nn.Module:
    """``config.model`` (a :class:`~rightreasons.engine.schema.ModelConfig`) with ``num_classes`` outputs, from
    the weights ``model.checkpoint`` names (a file or a run directory, :func:`run_model_file`)."""
    m = config.model
    return create_model(m.name, pretrained=m.pretrained, checkpoint=run_model_file(m.checkpoint),
                        num_classes=num_classes, **m.kwargs)


def has_boxes(dataset: Any) -> bool:
    """Whether any image of ``dataset`` carries boxes: EPG and IoU need them (Waterbirds loaded with
    ``data.options.box_file=null`` has none)."""
    return bool(dataset.annotated.any())


def validation_objectives(config: TrainConfig, val_set: Any) -> tuple[str, ...]:
    """What a run's Pareto front is taken over: ``score``, plus EPG and IoU when ``eval.localization`` is on and
    ``val_set`` has boxes (otherwise validation simply reports no localisation metrics, and says so once)."""
    if not config.eval.localization:
        return ("score",)
    if not has_boxes(val_set):
        logger.info("no image of the validation split %r of %s has boxes: validation reports no localisation "
                    "metrics (EPG, IoU)", getattr(val_set, "split", "?"), getattr(val_set, "name", "the data"))
        return ("score",)
    return ("score", "epg", "iou")


def localization_setting(config: TrainConfig, bcos: bool) -> tuple[str | None, str]:
    """Attribution method and layer that score EPG/IoU: ``eval.method``/``eval.layer`` when set, else the guidance
    method and layer of a guided run, else B-cos contributions (B-cos models) or GradCAM at the last stage.
    The method is ``None`` when ``eval.localization`` is off."""
    guided = config.guidance.enabled
    method = config.eval.method or (config.guidance.method if guided else ("bcos" if bcos else "gradcam"))
    layer = config.eval.layer or (config.guidance.layer if guided else get_method(method).default_layer)
    return (method if config.eval.localization else None), layer


def supervised_evaluators(config: TrainConfig, model: nn.Module, dataset: Any) -> list[Evaluator]:
    """Classification (accuracy or F1, groups) and, unless switched off or ``dataset`` has no boxes, localisation
    evaluators of ``model`` on ``dataset``, as :func:`localization_setting` decides."""
    method, layer = localization_setting(config, capabilities(model).bcos)
    return classifier_evaluators(dataset, method if has_boxes(dataset) else None, layer,
                                 iou_threshold=config.eval.iou_threshold, batch_size=config.data.eval_batch_size)


class ClassificationTask(Task):
    """Fine-tune ``config.model`` on ``config.data``, with box guidance when ``config.guidance.enabled``."""

    def __init__(self, config: TrainConfig) -> None:
        super().__init__(config)
        guidance = config.guidance
        self.guidance = GuidanceObjective(guidance.method, guidance.layer, guidance.loss, guidance.dilation, "sum",
                                          guidance.intgrad_steps, guidance.explain) if guidance.enabled else None
        self.loss_kind: Literal["bce", "ce"] = "bce"
        self.model: nn.Module | None = None
        run_model_file(config.model.checkpoint)  # a missing starting point fails before any work starts

    def build_datasets(self) -> tuple[Any, Any]:
        """Training set (limited annotations drawn with the run's seed) and validation set; sets the Pareto
        objectives (:func:`validation_objectives`)."""
        config, data = self.config, self.config.data
        train_set = load_dataset(data.name, data.root, data.train_split, annotated_fraction=data.annotated_fraction,
                                 annotation_seed=config.seed, **data.options)
        val_set = load_dataset(data.name, data.root, data.val_split, **data.options)
        self.objectives = validation_objectives(config, val_set)
        if self.guidance is not None and not has_boxes(train_set):
            raise TrainingError(f"guidance needs annotated images, but none of the {len(train_set)} training "
                                f"images of {data.name} has boxes (data.annotated_fraction={data.annotated_fraction})")
        return train_set, val_set

    def train_sampler(self, train_set: Any) -> EpochSampler:
        """A seeded permutation per epoch; with ``guidance.annotated_per_batch = k`` (guided runs), batches of ``k``
        annotated and ``batch_size − k`` other images (:class:`~rightreasons.engine.data.EpochSampler`)."""
        k = self.config.guidance.annotated_per_batch
        if self.guidance is None or not k:
            return super().train_sampler(train_set)
        try:
            return EpochSampler(len(train_set), self.config.seed, annotated=train_set.annotated, per_batch=k,
                                batch_size=self.config.data.batch_size)
        except ValueError as e:
            raise ConfigError(f"guidance.annotated_per_batch={k} (data.batch_size={self.config.data.batch_size}): "
                              f"{e}") from None

    def build_model(self, train_set: Any) -> nn.Module:
        """The model, with as many classes as the training set."""
        self.model = build_model(self.config, train_set.num_classes)
        self.loss_kind = resolve_classification_loss(self.config.loss.classification, capabilities(self.model).bcos,
                                                     is_multilabel(train_set))
        return self.model

    def losses(self, model: nn.Module, batch: dict[str, Any], step: Step) -> tuple[dict[str, Tensor], Tensor]:
        """``{"classification", "localization"}`` (0 without guidance) and ``L_class + λ · L_loc``."""
        images, labels = batch["image"], batch["labels"]
        if self.guidance is None:
            logits = model(images)
            localization = logits.new_zeros(())
        else:
            out = self.guidance(model, images, labels, batch["boxes"], batch["box_labels"], batch["has_boxes"],
                                step.generator)
            logits = out.logits
            # DDP averages gradients over processes: scale the local sum so that the result is the global sum
            # (reduction "sum") or the mean over the annotated images of the global batch ("mean_annotated").
            localization = out.loss * step.world_size
            if self.config.guidance.reduction == "mean_annotated":
                localization = localization / step.sum_across_processes(out.annotated.sum().float()).clamp(min=1)
        classification = classification_loss(logits.float(), labels, self.loss_kind,
                                             self.config.loss.uniform_off_labels)
        total = classification + self.config.guidance.weight * localization
        return {"classification": classification, "localization": localization}, total

    def evaluators(self, dataset: Any) -> list[Evaluator]:
        return supervised_evaluators(self.config, self.model, dataset)


def evaluate_checkpoint(config: TrainConfig, checkpoint: str | Path, split: str,
                        device: torch.device | str = "cpu") -> dict[str, Any]:
    """Evaluate a model file written by training (``model.safetensors``) on ``split`` of the config's dataset.

    The model is rebuilt from the file (:func:`rightreasons.load_model`); data, resolution and the localisation
    method come from ``config``.
    """
    model = load_model(checkpoint).to(device)
    data = config.data
    dataset = load_dataset(data.name, data.root, split, **data.options,
                           transform=eval_transform(data.image_size, encoding=capabilities(model).encoding,
                                                    crop_fraction=1.0))
    method, layer = localization_setting(config, capabilities(model).bcos)
    results = evaluate(model, dataset, supervised_evaluators(config, model, dataset),
                       batch_size=data.eval_batch_size, device=device)
    method = method if has_boxes(dataset) else None
    return {"checkpoint": str(checkpoint), "split": split, "images": len(dataset), "method": method, "layer": layer,
            **results}
