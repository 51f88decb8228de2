"""How a guided fine-tuning trains: :class:`GuidedRun`, the classifier's training recipe
(:class:`~rightreasons.classification.TrainingRun`) plus the ``guidance`` section, which starts from ``checkpoint``
(e.g. the baseline's model file), as the thesis fine-tunes pretrained models; and the recipe of the guidance study
and the demo on ``synthetic-birds``: :class:`GuidanceRecipe` builds the baseline of a :class:`DataVariant` and its
fine-tunings with each :class:`GuidedVariant`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..classification.config import EvalConfig
from ..classification.recipe import RECIPE_CROP_SCALE, TrainingRun
from ..config import construct, expect
from ..regions import POINT_RADIUS, REGIONS, RegionsName
from .config import GuidanceConfig, GuideConfig

__all__ = ["DATASET", "DATASET_REGIONS", "DataVariant", "GuidanceRecipe", "GuidedRun", "GuidedVariant", "SELECTABLE",
           "TEST_REGIONS", "check_weight_grid"]

DATASET = "synthetic-birds"
"""The benchmark of the guidance study and the demo (:mod:`rightreasons.data.synthetic`)."""
DATASET_REGIONS = ("boxes", "masks", "points")
"""The region sources its samples hold (a tight box, the object's mask and one click on the object per image,
:mod:`rightreasons.data.synthetic.generate`); a method whose regions draw on none of them is refused."""
TEST_REGIONS = ("boxes", "masks", "masks-else-boxes")
"""The regions a study can score EPG and IoU against on the test split (:data:`rightreasons.regions.REGIONS` without
points: a point's disc has no size but the radius one picks; the pointing game scores points)."""
TestRegions = Literal[TEST_REGIONS]  # type: ignore[valid-type]
SELECTABLE = ("score", "accuracy", "worst_group_accuracy")
"""The validation metrics a recipe can select checkpoints by (validation during a study scores classification only)."""


@dataclass
class GuidedRun(TrainingRun):
    """A :class:`~rightreasons.classification.TrainingRun` with the localisation term ``guidance``."""

    guidance: GuidanceConfig = field(default_factory=GuidanceConfig)

    def config(self) -> GuideConfig:
        """The full guidance config this recipe stands for."""
        return construct(lambda: GuideConfig(**self.sections(), guidance=self.guidance))


@dataclass(frozen=True)
class GuidedVariant:
    """One guided fine-tuning of the baseline: B-cos contributions at the input guided by a localisation loss."""

    name: str
    """The variant's name in the run directories and tables (not `baseline`)."""
    loss: str
    """The localisation loss (`guidance.loss`: `energy`, `l1`, `ppce`, `rrr`)."""
    weight: float
    """λ, its weight (`guidance.weight`)."""
    dilation: float = 0.0
    """Box dilation, a fraction of the box size (`guidance.dilation`)."""
    regions: RegionsName = "boxes"
    """What the loss pushes the evidence into (`guidance.regions`): `boxes` (the tight box, grown by `dilation`),
    `masks` (the object's pixels), `points` (a disc of `point_radius` around the one click per object),
    `masks-else-boxes` or `union`."""
    point_radius: float = POINT_RADIUS
    """Radius of the disc a point becomes, pixels of the model input (`guidance.point_radius`)."""
    annotated_fraction: float | None = None
    """The share of training images with boxes for this variant (the demo's few-boxes variant); null: the study's or
    demo's own. A study refuses it: its fractions are its `annotated_fraction` axis."""

    def __post_init__(self) -> None:
        expect(self.annotated_fraction is None or 0 < self.annotated_fraction <= 1, "annotated_fraction",
               self.annotated_fraction, "a fraction in (0, 1] or null")
        expect(self.name != "baseline" and bool(self.name.strip()), "name", self.name, "a name other than 'baseline'")
        expect(self.weight >= 0, "weight", self.weight, "a loss weight >= 0")
        expect(self.dilation >= 0, "dilation", self.dilation, "a fraction >= 0")
        expect(any(set(tier) & set(DATASET_REGIONS) for tier in REGIONS.get(self.regions, ())), "regions",
               self.regions, f"regions that {DATASET} holds ({', '.join(DATASET_REGIONS)})")
        expect(self.point_radius >= 0, "point_radius", self.point_radius, "a radius >= 0 in pixels of the model input")


@dataclass(frozen=True)
class DataVariant:
    """A variant of the benchmark: shortcut ``correlation`` in training, ``difficulty``, ``data_seed`` (which images
    are drawn), ``image_size``."""

    correlation: float = 1.0
    difficulty: float = 0.5
    data_seed: int = 0
    image_size: int = TrainingRun.image_size

    @property
    def label(self) -> str:
        return f"corr{self.correlation:g}-diff{self.difficulty:g}-data{self.data_seed}-{self.image_size}px"


@dataclass
class GuidanceRecipe:
    """How one cell trains: the baseline from scratch, then guided fine-tunings of it (B-cos contributions at the
    input), each exporting its best checkpoint on validation by ``select``."""

    model: str = TrainingRun.model
    """The registered architecture of every training."""
    model_kwargs: dict[str, Any] = field(default_factory=lambda: {"inplanes": 16})
    """Its constructor arguments (the default: a ResNet of width 16)."""
    batch_size: int = TrainingRun.batch_size
    """The training batch of every training."""
    crop_scale: list[float] = field(default_factory=lambda: list(RECIPE_CROP_SCALE))
    """Area fractions of the random resized crop (`data.crop_scale`)."""
    baseline_epochs: int = TrainingRun.epochs
    """Epochs of each baseline, trained from scratch."""
    baseline_lr: float = TrainingRun.lr
    """Adam learning rate of the baselines."""
    guided_epochs: int = 4
    """Epochs of each guided fine-tuning of a baseline; with `patience`, the most it trains."""
    patience: int | None = None
    """Early stopping of the guided fine-tunings (`eval.patience`): each ends after this many epochs without a new
    best validation `select`, so the number of guided epochs is chosen on validation; null: `guided_epochs`."""
    guided_lr: float = 2e-3
    """Adam learning rate of the guided fine-tunings."""
    train_images: int | None = None
    """Images of the training and of the validation split each; null: the generator's default sizes."""
    test_images: int = 1000
    """Images of the test split, on which every exported model is scored once."""
    test_regions: TestRegions = "boxes"
    """What EPG and IoU on the test split score against (`boxes`: the tight boxes, undilated; `masks`: the objects'
    pixels; `masks-else-boxes`), whatever region a method guides with. The scores of each run are kept in
    `<run>/test.json` for boxes and `<run>/test-<regions>.json` otherwise, so scoring a finished study against other
    regions trains nothing and replaces no earlier score."""
    select: str = "worst_group_accuracy"
    """The validation metric that chooses each training's exported checkpoint (`eval.select`)."""
    min_annotated_per_batch: int = 2
    """With few boxes (`annotated_fraction · batch_size` below this), every batch of a guided run holds this many
    annotated images (`guidance.annotated_per_batch`); 0: never."""

    def __post_init__(self) -> None:
        for key in ("batch_size", "baseline_epochs", "guided_epochs", "test_images"):
            expect(getattr(self, key) >= 1, key, getattr(self, key), "an integer >= 1")
        expect(self.patience is None or self.patience >= 1, "patience", self.patience, "an integer >= 1 or null")
        expect(self.train_images is None or self.train_images >= self.batch_size, "train_images", self.train_images,
               "null or at least one batch")
        expect(0 <= self.min_annotated_per_batch < self.batch_size, "min_annotated_per_batch",
               self.min_annotated_per_batch, "an integer in [0, batch_size)")
        expect(self.select in SELECTABLE, "select", self.select,
               f"one of {', '.join(SELECTABLE)} (validation scores classification only)")

    def data_options(self, variant: DataVariant, split: str) -> dict[str, Any]:
        """``load_dataset`` options of ``split`` (train, val or test) of ``variant``."""
        count = self.test_images if split == "test" else self.train_images
        return {"correlation": variant.correlation, "difficulty": variant.difficulty, "seed": variant.data_seed,
                "size": variant.image_size, **({"n": count} if count else {})}

    def annotated_per_batch(self, fraction: float) -> int:
        """Annotated images put into every batch at ``fraction`` boxes: ``min_annotated_per_batch`` when a batch
        would hold fewer on average, else 0 (batches drawn without regard to boxes)."""
        return self.min_annotated_per_batch if 0 < fraction * self.batch_size < self.min_annotated_per_batch else 0

    def run(self, variant: DataVariant, seed: int, output_dir: Path, guided: GuidedVariant | None = None,
            fraction: float = 1.0, baseline: Path | None = None) -> TrainingRun:
        """The baseline (``guided=None``) or the fine-tuning of ``baseline`` with ``guided`` on ``fraction`` boxes."""
        if guided is not None and baseline is None:
            raise ValueError(f"guided variant {guided.name!r} needs the baseline's model file to fine-tune")
        run = TrainingRun(
            output_dir=str(output_dir), seed=seed, model=self.model, model_kwargs=dict(self.model_kwargs),
            checkpoint=None if baseline is None else str(baseline), data=DATASET,
            data_options=self.data_options(variant, "train"),
            data_split_options={"test": self.data_options(variant, "test")}, image_size=variant.image_size,
            batch_size=self.batch_size, crop_scale=list(self.crop_scale),
            epochs=self.guided_epochs if guided else self.baseline_epochs,
            lr=self.guided_lr if guided else self.baseline_lr, annotated_fraction=fraction if guided else 1.0,
            eval=EvalConfig(every_epochs=1, select=self.select, num_images=0, localization=False,
                            patience=self.patience if guided else None), export="best")
        if guided is None:
            return run
        return GuidedRun(**vars(run), guidance=construct(
            GuidanceConfig, method="bcos", layer="input", loss=guided.loss, weight=guided.weight,
            dilation=guided.dilation, regions=guided.regions, point_radius=guided.point_radius,
            annotated_per_batch=self.annotated_per_batch(fraction), key="guidance"))


def check_weight_grid(grid: Mapping[str, Mapping[str, Sequence[Any]]], methods: Sequence[GuidedVariant]) -> None:
    """Refuse a λ grid (``grid.<method>.weight``) of a guided method without 0: the unguided fine-tuning of the same
    length must be a candidate, so that the λ chosen on validation is never worse there than no guidance."""
    for method in methods:
        weights = grid.get(method.name, {}).get("weight")
        expect(weights is None or 0 in weights, f"grid.{method.name}.weight", weights,
               "λ values that include 0 (the unguided fine-tuning of the same length, which the chosen λ must match "
               "or beat on validation)")
