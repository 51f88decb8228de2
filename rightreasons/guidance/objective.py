"""The guidance objective of one training step (thesis §7.1.5): ``L = L_class + λ_loc · L_loc``, the ``L_loc`` part.

Per image and step, one ground-truth class is drawn uniformly (seeded by a ``torch.Generator``); its mask is the
class's region (:mod:`rightreasons.regions`: its boxes, optionally dilated, its segmentation mask or its points, as
``regions`` chooses); images whose annotations are withheld (``has_boxes`` False: limited annotations) or whose region
for the class is empty get no localisation term.

Only the annotated images are explained (``explain="annotated"``): the batch is forwarded once for the logits of the
classification loss, then the annotated images alone are forwarded again and explained, so the second-order cost of
the localisation term grows with the number of annotated images, not with the batch. Batch statistics make this exact:
within :func:`~rightreasons.bcos.norms.shared_batch_statistics` the second forward uses the whole batch's BatchNorm
statistics, with their autograd graph, and leaves the running statistics alone; so loss and gradients (second order
included) equal those of explaining the whole batch (``explain="batch"``, the Model-Guidance code's way). The whole
batch is explained instead whenever that equality could not hold:

* a method other than the B-cos ones on a model normalising with batch statistics in training mode: the batched
  gradient of such a method carries cross-sample terms through the statistics (see :mod:`rightreasons.explain`),
  which only a backward pass through every image provides;
* batch-statistics modules that are not ours (e.g. :class:`torch.nn.BatchNorm2d` of torchvision models);
* models wrapped in ``DataParallel`` or ``torch.compile`` (replicas or traced graphs); DDP is fine.

With ``compile`` (a run's ``torch.compile`` backend) the step is compiled whole — forward, explanation, loss and the
parameters' backward (:class:`~rightreasons.explain.CompiledStep`, on the functional route of
:func:`~rightreasons.explain.functional_attribute`): the host decides classes, masks and which images are annotated as
always, and the compiled step explains the whole batch and reduces the loss over the annotated images (selecting them
would give every batch shapes of its own, hence a compilation of its own). Losses and gradients are those of
``explain="batch"``. What the functional route does not cover (other methods or layers, DDP, synchronised or foreign
BatchNorm, checkpointed stages) runs as without ``compile``, with a warning that says why.

Active dropout draws new masks in the second forward: the explanation is then that of another dropout draw
(statistically the same, not numerically).

With BatchNorm statistics synchronised across processes (:func:`~rightreasons.bcos.sync.convert_sync_batchnorm`),
every process must run the same passes through the norms, whatever its part of the batch holds: the choice between
explaining the annotated images and the whole batch then depends on the settings and the model only. A process
whose part has no annotated image, or only annotated ones, takes the path the others take (in the whole-batch path it
explains its images for a zero loss); the losses and gradients stay those of one process with the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from ..bcos.norms import shared_batch_statistics, training_batch_norms, unshareable_batch_norms
from ..bcos.sync import synchronised_batch_norms
from ..boxes import dilate_boxes
from ..errors import DataError, UsageError
from ..explain import INTGRAD_STEPS, MAP_METHOD_NAMES, CompiledStep, attribute, functional_attribute, get_method
from ..models.capabilities import unwrap_model
from ..regions import POINT_RADIUS, RegionMasks, region_masks, require_regions
from .losses import REDUCTIONS, LossFn, get_loss

__all__ = ["EXPLAIN_CHOICES", "GuidanceObjective", "GuidanceOutput", "sample_classes"]

#: which images a guidance step explains: only the annotated ones (exact, cheaper) or the whole batch
EXPLAIN_CHOICES = ("annotated", "batch")
ExplainChoice = Literal[EXPLAIN_CHOICES]  # type: ignore[valid-type]


@dataclass
class GuidanceOutput:
    """What :class:`GuidanceObjective` returns.

    Attributes:
        loss: the reduced localisation loss (a scalar; ``[N]`` with ``reduction="none"``), differentiable.
        logits: ``[N, K]`` the logits of the step's single forward pass (for the classification loss).
        classes: ``[N]`` the sampled ground-truth class per image.
        masks: ``[N, H, W]`` bool, the sampled class's region (:mod:`rightreasons.regions`); empty for images
            without one.
        annotated: ``[N]`` bool, the images that contributed a localisation term (``has_boxes`` and a non-empty
            region).
        attributions: ``[N, H, W]`` the attributions of the sampled classes (zeros for the images that were not
            explained: those not ``annotated`` when only the annotated images are explained); ``None`` when no image
            of the batch is annotated (then no attribution is computed and ``loss`` is 0).
        explained: ``[N]`` bool, the images that were explained (the annotated ones, or all).
    """

    loss: Tensor
    logits: Tensor
    classes: Tensor
    masks: Tensor
    annotated: Tensor
    attributions: Tensor | None
    explained: Tensor


def sample_classes(labels: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One class per image, uniformly among its positive labels (entries > 0.5 of ``labels [N, K]``).

    Images without a positive label draw uniformly among all classes. Sampling runs on the CPU, so a CPU
    ``generator`` gives the same classes whatever the labels' device.
    """
    if labels.dim() != 2:
        raise ValueError(f"labels must be multi-hot [N, K], got shape {tuple(labels.shape)}")
    weights = (labels.detach().cpu() > 0.5).float()
    weights[weights.sum(1) == 0] = 1.0
    return torch.multinomial(weights, 1, generator=generator)[:, 0].to(labels.device)


@dataclass
class GuidanceObjective:
    """The localisation term of a guidance step.

    Args:
        method: a map method of :mod:`rightreasons.explain.methods` (``bcos``, ``ixg``, ``gradcam``, ``intgrad``).
        layer: ``"input"``, ``"mid1"``–``"mid3"``, ``"final"`` or a module path.
        loss: localisation loss name (``"energy"``, ``"l1"``, ``"ppce"``, ``"rrr"``).
        dilation: grow every box by this fraction of its width/height (0.1 = 10 %) before building masks.
        reduction: how per-image losses combine (see :mod:`rightreasons.guidance.losses`).
        steps: Riemann steps for ``intgrad`` on models that are not X-DNNs.
        explain: ``"annotated"`` explains only the annotated images when that is exact (module docstring), else
            the whole batch; ``"batch"`` always explains the whole batch.
        compile: the ``torch.compile`` backend of the step (``compile`` of the run; module docstring), ``"no"``:
            eager.
        regions: what a class's region is made of (:data:`rightreasons.regions.REGIONS`: ``"boxes"``,
            ``"masks"``, ``"points"``, ``"masks-else-boxes"``, ``"union"``).
        point_radius: the radius, in pixels of the model input, of the disc a point becomes.

    ``compiled`` is the step's device part compiled whole (:class:`~rightreasons.explain.CompiledStep`; its ``fn``
    takes the bare model, the images, ``classes``, ``masks``, ``annotated`` and ``grad_scale``).
    """

    method: str = "bcos"
    layer: str = "input"
    loss: str = "energy"
    dilation: float = 0.0
    reduction: str = "mean_annotated"
    steps: int = INTGRAD_STEPS
    explain: str = "annotated"
    compile: str = "no"
    regions: str = "boxes"
    point_radius: float = POINT_RADIUS

    def __post_init__(self) -> None:
        if self.method not in MAP_METHOD_NAMES:
            raise UsageError(f"guidance needs an attribution map; method {self.method!r} is not one of "
                             f"{list(MAP_METHOD_NAMES)}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"unknown reduction {self.reduction!r}; valid reductions: {list(REDUCTIONS)}")
        if self.explain not in EXPLAIN_CHOICES:
            raise ValueError(f"explain must be one of {list(EXPLAIN_CHOICES)}, got {self.explain!r}")
        if not self.dilation >= 0:
            raise ValueError(f"dilation must be a fraction >= 0 (0.1 = 10 %), got {self.dilation!r}")
        get_loss(self.loss)
        require_regions(self.regions)
        if not self.point_radius >= 0:
            raise ValueError(f"point_radius must be >= 0 pixels, got {self.point_radius!r}")
        self.compiled = CompiledStep(self._explained_loss, self.compile, "guided step", self.method, self.layer)

    @property
    def loss_fn(self) -> LossFn:
        """The localisation loss function named by :attr:`loss`."""
        return get_loss(self.loss)

    def __call__(self, model: nn.Module, images: Tensor, labels: Tensor, boxes: Sequence[Tensor],
                 box_labels: Sequence[Tensor], has_boxes: Tensor, generator: torch.Generator | None = None, *,
                 create_graph: bool = True, grad_scale: float | Tensor = 1.0,
                 segmentations: Tensor | Sequence[Tensor | None] | None = None,
                 points: Sequence[Tensor] | None = None, point_labels: Sequence[Tensor] | None = None
                 ) -> GuidanceOutput:
        """Run the step's forward pass and the localisation loss.

        ``labels``, ``boxes``, ``box_labels`` and ``has_boxes`` decide which class of which image is explained, and
        where: that is decided on the host, so pass them as the loader gives them, on the CPU (the trainer passes the
        batch's host copy), and the step never waits for the device; tensors on a device are copied to the host
        first, a host sync each. The outputs are on the images' device.

        Args:
            model: the classifier being trained.
            images: ``[N, C, H, W]``.
            labels: ``[N, K]`` multi-hot ground truth.
            boxes: per image, its boxes, XYXY in image pixels (``[B_n, 4]`` tensors or ``tv_tensors.BoundingBoxes``).
            box_labels: per image, the class of each box ``[B_n]``.
            has_boxes: ``[N]`` bool, whether the image's annotations (boxes, segmentation, points) may be used
                (limited annotations).
            generator: seeds the class sampling (a CPU generator).
            create_graph: keep the attributions differentiable (needed to train on the loss).
            grad_scale: the loss scale of a float16 step, which seeds the explanation's backward
                (:func:`~rightreasons.explain.attribute`).
            segmentations: the batch's ``mask``: ``[N, H, W]``, or a list with ``None`` for images without one
                (VOC convention, :mod:`rightreasons.data.sample`).
            points, point_labels: per image its points ``[P_n, 2]`` XY in image pixels and their classes ``[P_n]``.
        """
        n, device = images.shape[0], images.device
        labels, has_boxes = labels.detach().cpu(), has_boxes.cpu()  # no-ops for the loader's batch (module docstring)
        if images.dim() != 4 or labels.shape[0] != n or has_boxes.shape != (n,) or has_boxes.dtype != torch.bool:
            raise ValueError(f"expected images [N, C, H, W], labels [N, K] and has_boxes [N] bool with one N, got "
                             f"{tuple(images.shape)}, {tuple(labels.shape)}, {has_boxes.dtype} "
                             f"{tuple(has_boxes.shape)}")
        unlabelled = has_boxes & ~(labels > 0.5).any(1)
        if unlabelled.any():
            raise DataError(f"images {unlabelled.nonzero()[:, 0].tolist()} of the batch have boxes but no positive "
                            "label")
        classes = sample_classes(labels, generator)
        size = tuple(images.shape[-2:])
        masks, void = self.region_masks(boxes, box_labels, classes, has_boxes, size, segmentations, points,
                                        point_labels)
        annotated = has_boxes & masks.flatten(1).any(1)
        annotated_only = self.explains_annotated_only(model, annotated)
        none = not annotated.any()
        index = annotated.nonzero()[:, 0].to(device, non_blocking=True)
        classes, masks, annotated = (t.to(device, non_blocking=True) for t in (classes, masks, annotated))
        void = None if void is None or not void.any() else void.to(device, non_blocking=True)  # decided on the host
        if none and (annotated_only or not synchronised_batch_norms(unwrap_model(model))):
            logits = model(images)
            return GuidanceOutput(loss=logits.new_zeros(() if self.reduction != "none" else (n,)), logits=logits,
                                  classes=classes, masks=masks, annotated=annotated, attributions=None,
                                  explained=annotated)
        if create_graph and self.compiled.runs(model):  # compiled whole: the whole batch (module docstring)
            logits, maps, loss = self.compiled(model, images, classes, masks, annotated, grad_scale, void)
            return GuidanceOutput(loss=loss, logits=logits, classes=classes, masks=masks, annotated=annotated,
                                  attributions=maps, explained=torch.ones_like(annotated))
        if not annotated_only:
            result = attribute(model, images, classes, self.method, self.layer, create_graph=create_graph,
                               steps=self.steps, grad_scale=grad_scale)
            loss = self.loss_fn(result.maps, masks, self.reduction, annotated, void)
            return GuidanceOutput(loss=loss, logits=result.logits, classes=classes, masks=masks, annotated=annotated,
                                  attributions=result.maps, explained=torch.ones_like(annotated))
        inner = unwrap_model(model)
        with shared_batch_statistics(inner):
            logits = model(images)  # the whole batch: classification logits; its batch statistics are recorded
            result = attribute(inner, images[index], classes[index], self.method, self.layer,
                               create_graph=create_graph, steps=self.steps, grad_scale=grad_scale)
        part = self.loss_fn(result.maps, masks[index], self.reduction, torch.ones_like(index, dtype=torch.bool),
                            None if void is None else void[index])
        loss = part.new_zeros(n).index_copy(0, index, part) if self.reduction == "none" else part
        maps = result.maps.new_zeros((n, *result.maps.shape[1:])).index_copy(0, index, result.maps)
        return GuidanceOutput(loss=loss, logits=logits, classes=classes, masks=masks, annotated=annotated,
                              attributions=maps, explained=annotated)

    def _explained_loss(self, model: nn.Module, images: Tensor, classes: Tensor, masks: Tensor, annotated: Tensor,
                        grad_scale: float | Tensor, void: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """The device part of a step compiled whole: the logits ``[N, K]``, the attributions ``[N, H, W]`` of
        ``classes [N]`` and the loss (over the ``annotated [N]`` images, of ``masks [N, H, W]`` less the ``void``
        pixels) of the bare ``model`` on ``images [N, C, H, W]``."""
        result = functional_attribute(model, images, classes, self.method, grad_scale=grad_scale)
        return result.logits, result.maps, self.loss_fn(result.maps, masks, self.reduction, annotated, void)

    def explains_annotated_only(self, model: nn.Module, annotated: Tensor) -> bool:
        """Whether a step explains only the ``annotated [N]`` images (a bool tensor on the host) of its batch
        (exactly; module docstring)."""
        inner = unwrap_model(model)
        if self.explain != "annotated" or (bool(annotated.all()) and not synchronised_batch_norms(inner)):
            return False
        if model is not inner and not isinstance(model, DistributedDataParallel):
            return False
        if not training_batch_norms(inner):
            return True  # per-sample statistics only: the images of a batch do not interact
        return get_method(self.method).explaining and not unshareable_batch_norms(inner)

    def masks(self, boxes: Sequence[Tensor], box_labels: Sequence[Tensor], classes: Tensor, has_boxes: Tensor,
              size: tuple[int, int], segmentations: Tensor | Sequence[Tensor | None] | None = None,
              points: Sequence[Tensor] | None = None, point_labels: Sequence[Tensor] | None = None) -> Tensor:
        """``[N, H, W]`` bool on the host: per image its region for ``classes[n]`` (:attr:`regions`, boxes
        dilated), empty where ``has_boxes`` is False (:meth:`region_masks` without the void)."""
        return self.region_masks(boxes, box_labels, classes, has_boxes, size, segmentations, points,
                                 point_labels).inside

    def region_masks(self, boxes: Sequence[Tensor], box_labels: Sequence[Tensor], classes: Tensor, has_boxes: Tensor,
                     size: tuple[int, int], segmentations: Tensor | Sequence[Tensor | None] | None = None,
                     points: Sequence[Tensor] | None = None, point_labels: Sequence[Tensor] | None = None
                     ) -> RegionMasks:
        """Per image its region for ``classes[n]`` (:attr:`regions`, boxes dilated) and the region's void pixels,
        ``[N, H, W]`` bool on the host each (:func:`rightreasons.regions.region_masks`), empty where ``has_boxes``
        is False.

        Everything is in pixels of the ``size = (H, W)`` images (see :mod:`rightreasons.boxes` for the pixel and
        point rules and the dilation convention of the Model-Guidance release)."""
        keep = has_boxes.tolist()

        def kept(values: Sequence[Tensor]) -> list[Tensor]:
            return [torch.as_tensor(v).cpu() if k else torch.as_tensor(v).cpu()[:0] for v, k in zip(values, keep)]

        used = kept(boxes)
        if self.dilation:
            used = [dilate_boxes(b, self.dilation, size) for b in used]
        if segmentations is not None:
            segmentations = [s if k else None for s, k in zip(segmentations, keep)]
        return region_masks(self.regions, classes.cpu(), size, used, kept(box_labels), segmentations,
                            None if points is None else kept(points),
                            None if point_labels is None else kept(point_labels), self.point_radius)
