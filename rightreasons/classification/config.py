"""The config of ``rightreasons train``: the engine's run config plus the model, the classification loss, the B ramp
of B-cosified models and the localisation metrics of validation. Guidance (:mod:`rightreasons.guidance.config`) and
distillation (:mod:`rightreasons.distill.config`) extend it. A minimal config::

    output_dir: runs/voc-baseline
    model: {name: bcos_resnet50, pretrained: true}
    data: {name: voc2007, root: data/VOCdevkit/VOC2007, image_size: 224, batch_size: 64}
    optim: {name: adam, lr: 1.0e-4, epochs: 50}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..config import expect
from ..engine import config as engine
from ..explain.methods import MapMethodName, get_method
from ..models import checked_arguments
from ..regions import POINT_RADIUS, RegionsName
from .loss import ClassificationLossName

__all__ = ["ClassificationConfig", "EvalConfig", "LossConfig", "ModelConfig", "OptimConfig"]


@dataclass
class ModelConfig:
    """Which model to train: a registry name plus the weights to start from."""

    name: str | None = "bcos_resnet18"
    """A registered model (`rightreasons models` lists them). null: the architecture and arguments that `checkpoint`
    records (a model file or run of ours), so that a fine-tuning need not repeat them; a `name` or `kwargs` that
    differ from what the file records are refused with each differing argument."""
    pretrained: bool = False
    """Start from the published ImageNet weights of `name` (the classifier is replaced to fit the data's classes):
    how the shipped baselines start. Needs `name`."""
    checkpoint: str | None = None
    """Start from a weights file (any layout `rightreasons.models.weights.load_weights` reads, e.g. our
    `model.safetensors`) or a finished run's directory, which stands for its `model.safetensors`: how the shipped
    guided runs start from their baseline."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments of the architecture, e.g. `{inplanes: 16}` for a ResNet of width 16; never
    `num_classes`, which comes from the data (for a student, from its teacher). Checked against the constructor when
    the config is read."""
    sync_bn: bool = True
    """On several processes, take the BatchNorm statistics of a training step over the global batch (synchronised
    BatchNorm), so that N processes train exactly as one process with the same global batch; false normalises each
    process's part of the batch by itself (cheaper; with small per-process batches a different training). No effect
    on one process, on per-sample norms or in evaluation."""
    activation_checkpointing: bool | list[Literal["mid1", "mid2", "mid3", "final"]] = False
    """Store only each stage's input for the backward and recompute its activations when a backward needs them
    (`torch.utils.checkpoint`, `rightreasons.models.checkpointing`): `true` for every stage of a ResNet,
    DenseNet or ConvNeXt, or a list of the stages, e.g. `[mid1, mid2]`; false: none. Losses, gradients (of every
    order) and BatchNorm statistics are those without it. For a B-cos ResNet-50 at 224 px it cuts the peak memory per
    image of a plain step and of guidance at `final` by 31 % and at `mid2` by 39 %, for 17-33 % more step time;
    guidance at the input gains nothing (its explanation's backward keeps the recomputed activations for the
    second-order gradient: 10 % more per image, 28 % more time; `make bench`, `stage-checkpointing`). Models without
    stages (ViTs) or whose stages are single layers (VGGs) are refused."""

    def __post_init__(self) -> None:
        if self.name is None:
            expect(self.checkpoint is not None and not self.pretrained, "name", self.name,
                   "a registered model name (null takes the architecture of model.checkpoint, which is not set)"
                   if self.checkpoint is None else "a registered model name with pretrained: true")
        else:
            expect(bool(self.name.strip()), "name", self.name, "a registered model name")
        expect(self.checkpoint is None or bool(self.checkpoint.strip()), "checkpoint", self.checkpoint,
               "a file path, a run directory or null")
        expect("num_classes" not in self.kwargs, "kwargs", self.kwargs,
               "constructor arguments without num_classes (the number of classes comes from the data, or for a "
               "student from its teacher)")
        stages = self.activation_checkpointing
        expect(isinstance(stages, bool) or bool(stages) and len(set(stages)) == len(stages),
               "activation_checkpointing", stages, "true, false or a non-empty list of distinct stage names")
        if self.name is not None:
            self.kwargs = checked_arguments(self.name, self.kwargs)


@dataclass
class LossConfig:
    """The classification loss (:mod:`rightreasons.classification.loss`)."""

    classification: ClassificationLossName = "auto"
    """`bce` (one sigmoid per class, the B-cos recipe), `ce` (softmax cross-entropy against the single positive
    class) or `auto`: `bce` for B-cos models and multi-label data, `ce` otherwise. The probabilities of `evaluate`
    and `explain` follow the link of this loss."""
    uniform_off_labels: bool = False
    """With `bce`: raise the off-targets to `1/K` for K classes (the B-cos v2 release's uniform off-labels)."""


@dataclass
class OptimConfig(engine.OptimConfig):
    """The engine's optimiser section plus the B ramp of B-cosified models (:mod:`rightreasons.models.bcosify`)."""

    b_ramp_epochs: float = 0.0
    """B-cosified models only: raise the exponent B of every B-cos unit linearly from 1 to the B the model was built
    with (`model.kwargs.b`, default 2) over this many epochs of optimiser steps, then keep it (the B-cosification
    release's `linear_b` ablation); 0: that B from the start, the recipe. Training and every validation use the B of
    the current step; the exported model records it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        expect(self.b_ramp_epochs >= 0, "b_ramp_epochs", self.b_ramp_epochs,
               "a number of epochs >= 0 (0 = B fixed from the start)")


@dataclass
class EvalConfig(engine.EvalConfig):
    """The engine's validation section plus localisation (EPG, IoU) and explanation images."""

    method: MapMethodName | None = None
    """The attribution method whose maps score EPG and IoU; null: the task's choice (the guided method for `guide`,
    else B-cos contributions for B-cos models, GradCAM otherwise)."""
    layer: str | None = None
    """The layer `method` explains (`input`, `mid1`-`mid3`, `final` or a module path); null: the guided layer for
    `guide`, else the method's default layer."""
    iou_threshold: float = 0.5
    """IoU binarises each map, its positive part min-max scaled to [0, 1], at this threshold (the Model-Guidance
    code's 0.5) before comparing it with the boxes."""
    regions: RegionsName = "boxes"
    """What EPG and IoU score a map against, in validation and in `rightreasons evaluate` (whose `--regions`
    overrides it): `boxes` (the union of the class's boxes), `masks` (its pixels in the segmentation mask, void
    pixels left out), `points` (a disc of `point_radius` around each point), `masks-else-boxes` or `union`, as
    `guidance.regions` (`rightreasons.regions`). Independent of `guidance.regions`, so that a run guided on masks or
    points is scored as its baseline and the runs guided otherwise are; set it to score against masks."""
    point_radius: float = POINT_RADIUS
    """Radius, in pixels of the model input, of the disc a point becomes when `regions` uses points."""
    num_images: int = 4
    """After each validation, draw the explanations of this many validation images into `explanations/step-N/`
    (B-cos models only); 0: none."""
    localization: bool = True
    """Score localisation (EPG, IoU) in validation, where the validation split has boxes; false: classification
    scores only."""

    def __post_init__(self) -> None:
        super().__post_init__()
        expect(self.layer is None or bool(self.layer.strip()), "layer", self.layer, "a layer name or null")
        expect(0 <= self.iou_threshold <= 1, "iou_threshold", self.iou_threshold, "a threshold in [0, 1]")
        expect(self.num_images >= 0, "num_images", self.num_images, "an integer >= 0")
        expect(self.point_radius >= 0, "point_radius", self.point_radius, "a radius >= 0 in pixels of the model input")


@dataclass
class ClassificationConfig(engine.TrainConfig):
    """A classifier's training run (``rightreasons train``)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def localization(self, bcos: bool) -> tuple[str | None, str]:
        """Attribution method and layer that score EPG/IoU: ``eval.method``/``eval.layer`` when set, else B-cos
        contributions (B-cos models) or GradCAM, at the method's default layer. The method is ``None`` when
        ``eval.localization`` is off."""
        method = self.eval.method or ("bcos" if bcos else "gradcam")
        layer = self.eval.layer or get_method(method).default_layer
        return (method if self.eval.localization else None), layer
