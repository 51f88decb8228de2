"""The config of ``rightreasons guide``: a classifier's training config plus the ``guidance`` section. A minimal
guidance config::

    output_dir: runs/voc-energy
    model: {name: bcos_resnet50, checkpoint: runs/voc-baseline}
    data: {name: voc2007, root: data/VOCdevkit/VOC2007, image_size: 224, batch_size: 64}
    optim: {name: adam, lr: 1.0e-4, epochs: 50}
    guidance: {method: bcos, layer: input, loss: energy, weight: 1.0e-3}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..classification.config import ClassificationConfig
from ..config import expect
from ..explain.attribution import INTGRAD_STEPS
from ..explain.methods import MapMethodName
from .losses import GuidanceReduction, LossName
from .objective import ExplainChoice

__all__ = ["GuidanceConfig", "GuideConfig"]


@dataclass
class GuidanceConfig:
    """The localisation term ``weight · L_loc``: ``loss`` on the attributions of ``method`` at ``layer``, against the
    boxes dilated by ``dilation`` (a fraction of their size), reduced by ``reduction`` over the annotated images.

    ``explain``: ``annotated`` (default) explains only the annotated images of a batch whenever that equals explaining
    the whole batch (always for the B-cos method with our norms; otherwise the whole batch is explained, see
    :mod:`rightreasons.guidance.objective`); ``batch`` always explains the whole batch. ``annotated_per_batch``: put
    exactly this many annotated images into every training batch (cycling through the annotated set; an epoch stays
    ``n // batch_size`` batches, see :class:`~rightreasons.engine.data.EpochSampler`), so that guidance from few boxes
    (1 %) acts at every step; 0 draws batches without regard to boxes. ``intgrad_steps``: the Riemann steps of
    ``intgrad`` on a model that is not an X-DNN (default: every explanation's,
    :data:`~rightreasons.explain.attribution.INTGRAD_STEPS`).
    """

    method: MapMethodName = "bcos"
    layer: str = "input"
    loss: LossName = "energy"
    weight: float = 1e-3
    dilation: float = 0.0
    reduction: GuidanceReduction = "mean_annotated"
    intgrad_steps: int = INTGRAD_STEPS
    explain: ExplainChoice = "annotated"
    annotated_per_batch: int = 0

    def __post_init__(self) -> None:
        expect(self.annotated_per_batch >= 0, "annotated_per_batch", self.annotated_per_batch,
               "an integer >= 0 (0 = batches drawn without regard to boxes)")
        expect(bool(self.layer.strip()), "layer", self.layer, "a layer name (input, mid1-mid3, final or a module path)")
        expect(self.weight >= 0, "weight", self.weight, "a loss weight >= 0")
        expect(self.dilation >= 0, "dilation", self.dilation, "a fraction >= 0 (0.1 = 10 %)")
        expect(self.intgrad_steps >= 1, "intgrad_steps", self.intgrad_steps, "an integer >= 1")


@dataclass
class GuideConfig(ClassificationConfig):
    """A box-guided fine-tuning (``rightreasons guide``): a classifier's training plus the localisation term."""

    guidance: GuidanceConfig = field(default_factory=GuidanceConfig)

    def localization(self, bcos: bool) -> tuple[str | None, str]:
        """As for any classifier, but EPG/IoU are scored with the guided method and layer unless ``eval.method`` /
        ``eval.layer`` say otherwise."""
        method = self.eval.method or self.guidance.method
        layer = self.eval.layer or self.guidance.layer
        return (method if self.eval.localization else None), layer
