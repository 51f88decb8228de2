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
from ..regions import POINT_RADIUS, RegionsName
from .losses import GuidanceReduction, LossName
from .objective import ExplainChoice

__all__ = ["GuidanceConfig", "GuideConfig"]


@dataclass
class GuidanceConfig:
    """The localisation term ``weight · L_loc``: ``loss`` on the attributions of ``method`` at ``layer`` against the
    region (``regions``: boxes, masks, points) of one ground-truth class per image, reduced over the annotated images
    (:mod:`rightreasons.guidance.objective`)."""

    method: MapMethodName = "bcos"
    """The attribution method that is guided (`rightreasons.explain.methods`, those that give a map): `bcos` (B-cos
    contributions, B-cos models), `gradcam`, `ixg`, `intgrad`, ..."""
    layer: str = "input"
    """Where the attributions are taken: `input`, `mid1`-`mid3` (after the stages), `final` (the last feature map)
    or a module path."""
    loss: LossName = "energy"
    """The localisation loss: `energy` (1 − EPG, the share of positive attribution outside the boxes), `l1` (L1
    distance of the normalised positive attribution to the mask), `ppce` (per-pixel cross-entropy on the mask) or
    `rrr` (RRR*: squared attribution outside the boxes) or `energy-size` (Energy corrected for the region's size:
    the inside share over the region's area share, clipped at 1, so a large box is not an easy target)."""
    regions: RegionsName = "boxes"
    """What a class's region is: `boxes` (the union of its boxes), `masks` (its pixels in the sample's segmentation
    mask), `points` (a disc of `point_radius` around each point), `masks-else-boxes` (the mask where it holds the
    class, else the boxes) or `union` (all three). Images whose region is empty get only the classification loss;
    validation scores EPG and IoU against the same regions."""
    point_radius: float = POINT_RADIUS
    """Radius, in pixels of the model input, of the disc a point becomes (the pointing game's 15 px tolerance by
    default)."""
    weight: float = 1e-3
    """λ, the weight of the localisation term beside the classification loss; 0 trains without guidance (a control
    run)."""
    dilation: float = 0.0
    """Grow every box by this fraction of its size before it becomes a mask (0.1 = 10 %): guidance from coarse
    boxes."""
    reduction: GuidanceReduction = "mean_annotated"
    """`mean_annotated`: the mean over the annotated images of the batch; `sum`: their sum."""
    intgrad_steps: int = INTGRAD_STEPS
    """Riemann steps of `intgrad` on a model that is not an X-DNN (on an X-DNN one step is exact)."""
    explain: ExplainChoice = "annotated"
    """`annotated` explains only the annotated images of a batch whenever that equals explaining the whole batch
    (always for the B-cos method with our norms; otherwise the whole batch is explained); `batch` always explains
    the whole batch."""
    annotated_per_batch: int = 0
    """Put exactly this many annotated images into every training batch (cycling through the annotated set; an epoch
    keeps its number of batches), so that guidance from few boxes (1 %) acts at every step; 0 draws batches without
    regard to boxes."""

    def __post_init__(self) -> None:
        expect(self.annotated_per_batch >= 0, "annotated_per_batch", self.annotated_per_batch,
               "an integer >= 0 (0 = batches drawn without regard to boxes)")
        expect(bool(self.layer.strip()), "layer", self.layer, "a layer name (input, mid1-mid3, final or a module path)")
        expect(self.weight >= 0, "weight", self.weight, "a loss weight >= 0")
        expect(self.dilation >= 0, "dilation", self.dilation, "a fraction >= 0 (0.1 = 10 %)")
        expect(self.point_radius >= 0, "point_radius", self.point_radius, "a radius >= 0 in pixels of the model input")
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
