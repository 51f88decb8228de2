"""The config of ``rightreasons guide``: a classifier's training config plus the ``guidance`` section. A minimal
guidance config::

    output_dir: runs/voc-energy
    model: {name: bcos_resnet50, checkpoint: runs/voc-baseline}
    data: {name: voc2007, root: data/VOCdevkit/VOC2007, image_size: 224, batch_size: 64}
    optim: {name: adam, lr: 1.0e-4, epochs: 50}
    guidance: {method: bcos, layer: input, loss: energy, weight: 1.0e-3}

With a ``selection`` section (``selection: {grid: {guidance.weight: [0, 5, 25]}}``) the run chooses among candidate
settings on validation (:mod:`rightreasons.guidance.choosing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..classification.config import ClassificationConfig
from ..config import FieldError, apply_overrides, excerpt, expect, from_dict, to_dict, yaml_value
from ..engine.selection import combinations
from ..errors import ConfigError
from ..explain.attribution import INTGRAD_STEPS
from ..explain.methods import MapMethodName
from ..regions import POINT_RADIUS, RegionsName
from .losses import GuidanceReduction, LossName
from .objective import ExplainChoice

__all__ = ["GuidanceConfig", "GuideConfig", "SelectionConfig"]


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
    class, else the boxes) or `union` (all three). Images whose region is empty get only the classification loss.
    Validation and `evaluate` score EPG and IoU against `eval.regions` (boxes unless set), not these regions, so
    that runs guided on different annotations, and their baseline, are scored alike."""
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


#: the top-level keys a selection grid may not vary: its own section, what every candidate sets itself (its directory
#: and seeds) and validation, which must score every candidate alike
UNSELECTABLE = ("selection", "output_dir", "seed", "eval")


@dataclass
class SelectionConfig:
    """Settings of one `guide` run chosen on validation (:mod:`rightreasons.guidance.choosing`): every combination of
    `grid` trains, each with `seeds` seeds, and the best mean validation `eval.select` is chosen
    (:mod:`rightreasons.engine.selection`)."""

    grid: dict[str, list[Any]] = field(default_factory=dict)
    """Config keys (dotted, e.g. `guidance.weight`) → the candidate values, every combination a candidate trained into
    `output_dir/candidates/<label>`; the chosen model is exported to `output_dir` (and scored once on the test split).
    Empty: a plain run. Not `eval.*`, `seed`, `output_dir` or `selection.*`."""
    seeds: int = 1
    """Training seeds per candidate (`seed`, `seed` + 1, ...); the validation scores are averaged over them and the
    chosen candidate's first seed is exported."""
    start: bool = True
    """When the run fine-tunes `model.checkpoint`: the starting model itself, scored on the validation split by the
    same metric, is a candidate (`baseline`, first in grid order, kept on a tie), so the run never hands back a model
    worse on validation than the one it started from."""

    def __post_init__(self) -> None:
        expect(self.seeds >= 1, "seeds", self.seeds, "an integer >= 1")
        expect(bool(self.grid) or self.seeds == 1, "seeds", self.seeds, "1 without a grid (seeds are the grid's)")
        for key, values in self.grid.items():
            where = f"grid.{key}"
            expect(key.split(".")[0] not in UNSELECTABLE, where, key,
                   f"a config key outside {', '.join(UNSELECTABLE)} (validation scores every candidate alike; each "
                   "sets its own directory and seeds)")
            expect(isinstance(values, list) and len(values) > 0, where, values, "a non-empty list of values")
            repeated = [v for i, v in enumerate(values) if v in values[:i]]
            expect(not repeated, where, values, f"distinct values (repeated: {repeated})")


@dataclass
class GuideConfig(ClassificationConfig):
    """A box-guided fine-tuning (``rightreasons guide``): a classifier's training plus the localisation term."""

    guidance: GuidanceConfig = field(default_factory=GuidanceConfig)
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    """Candidate settings chosen on validation; by default none (a plain run)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.candidates()  # every value of the grid is checked here, before any training

    def candidates(self) -> list[tuple[str, dict[str, Any], GuideConfig]]:
        """``(label, {key: value}, config)`` of every combination of ``selection.grid`` in grid order
        (:func:`~rightreasons.engine.selection.combinations`): this config with those values and without the
        ``selection`` section (``output_dir`` and ``seed`` are the caller's to set); empty without a grid. A key or
        value the config would refuse is a :class:`~rightreasons.config.FieldError` on ``selection.grid.<key>``."""
        grid = self.selection.grid
        if not grid:
            return []

        def build(changes: dict[str, Any]) -> GuideConfig:
            raw = {k: v for k, v in to_dict(self).items() if k != "selection"}
            return from_dict(type(self), apply_overrides(raw, [f"{k}={yaml_value(v)}" for k, v in changes.items()]))

        for key, values in grid.items():  # each key and value alone, so that an error names the key
            for value in values:
                try:
                    build({key: value})
                except ConfigError as e:
                    raise FieldError(f"selection.grid.{key}", f"{key}={excerpt(value)}: {e}") from None
        out = []
        for label, changes in combinations(grid):
            try:
                out.append((label, changes, build(changes)))
            except ConfigError as e:
                raise FieldError("selection.grid", f"the combination {label} would not train: {e}") from None
        return out

    def localization(self, bcos: bool) -> tuple[str | None, str]:
        """As for any classifier, but EPG/IoU are scored with the guided method and layer unless ``eval.method`` /
        ``eval.layer`` say otherwise."""
        method = self.eval.method or self.guidance.method
        layer = self.eval.layer or self.guidance.layer
        return (method if self.eval.localization else None), layer
