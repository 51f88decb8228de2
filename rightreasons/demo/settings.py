"""What the demo trains: data, model, schedules and the guided variants, for the full and the ``--quick`` run.

The benchmark is ``synthetic-birds`` (:mod:`rightreasons.data.synthetic`), a Waterbirds-100-like task: a disc
(landbird) or triangle (waterbird) on a land or water background, the background matching the class in every
training image, and the validation and test splits balanced over the four groups. The model is a narrow B-cos
ResNet-18 at 64 px and the e²KD student one of half its width. Every training is the guidance study's recipe
(:class:`~rightreasons.experiments.GuidanceRecipe`): it exports the checkpoint with the best validation worst-group
accuracy, and the test split is only reported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import UsageError
from ..experiments.guidance_study import DataVariant, GuidanceRecipe, GuidedVariant

__all__ = ["DemoSettings", "DistillationSettings", "GuidedVariant"]


@dataclass(frozen=True)
class DistillationSettings:
    """The e²KD stage: distil each seed's guided model ``teacher`` into a smaller B-cos ``student`` on the biased
    training split, once per mode (``kd``: logits only; ``e2kd``: logits and live explanations; ``e2kd_frozen``:
    explanations cached once per image), with Adam at ``lr`` for ``epochs``, τ = ``temperature`` and λ =
    ``explanation_weight``. Validation during training uses ``val_images`` images of the (biased) validation split and
    only tracks progress; the stage scores the students on the test split."""

    teacher: str = "energy"
    student: str = "bcos_resnet18"
    student_kwargs: dict[str, Any] = field(default_factory=lambda: {"inplanes": 8})
    epochs: int = 4
    lr: float = 1e-3
    temperature: float = 1.0
    explanation_weight: float = 5.0
    modes: tuple[str, ...] = ("kd", "e2kd", "e2kd_frozen")
    val_images: int = 128

    def __post_init__(self) -> None:
        known = ("kd", "e2kd", "e2kd_frozen")
        if not self.modes or any(mode not in known for mode in self.modes):
            raise UsageError(f"distillation.modes must be a non-empty selection of {list(known)}, got "
                             f"{list(self.modes)}")
        if self.epochs < 1 or self.val_images < 1:
            raise UsageError(f"distillation.epochs and distillation.val_images must be >= 1, got {self.epochs} and "
                             f"{self.val_images}")


@dataclass(frozen=True)
class DemoSettings:
    """All knobs of a demo run; :meth:`full` and :meth:`quick` are the two presets the command offers.

    ``data_options`` go to ``load_dataset("synthetic-birds", None, split, ...)`` for every split; ``train_images``
    (when set) fixes the size of the training and validation splits, ``test_images`` the test split's. ``smoke``
    marks a smoke run (the quick preset): it exercises every stage, too small for the benchmark checks to mean
    anything, and its report says so next to each check.
    """

    seeds: int = 3
    image_size: int = 64
    data_options: dict[str, Any] = field(default_factory=lambda: {"difficulty": 0.5, "correlation": 1.0, "seed": 0})
    train_images: int | None = None
    test_images: int = 1000
    model: str = "bcos_resnet18"
    model_kwargs: dict[str, Any] = field(default_factory=lambda: {"inplanes": 16})
    batch_size: int = 64
    crop_scale: tuple[float, float] = (0.5, 1.0)
    baseline_epochs: int = 10
    baseline_lr: float = 1e-3
    guided_epochs: int = 4
    guided_lr: float = 2e-3
    annotated_fraction: float = 0.1
    min_annotated_per_batch: int = 2
    # The weights λ were chosen on the validation split by configs/studies/demo_selection.yaml (the best mean
    # validation worst-group accuracy over 3 seeds of λ ∈ {1, 5, 25}, per loss and box share: 25 in all four cases);
    # the dilated variants keep their loss's λ.
    variants: tuple[GuidedVariant, ...] = (
        GuidedVariant("energy", "energy", 25.0),
        GuidedVariant("l1", "l1", 25.0),
        GuidedVariant("energy-dilated50", "energy", 25.0, 0.5),
        GuidedVariant("l1-dilated50", "l1", 25.0, 0.5),
        GuidedVariant("energy-1pct", "energy", 25.0, annotated_fraction=0.01),
    )
    explain_per_group: int = 2
    distillation: DistillationSettings = field(default_factory=DistillationSettings)
    smoke: bool = False

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise UsageError(f"the demo needs at least one seed, got seeds={self.seeds}")
        unknown = sorted(set(self.data_options) - {"correlation", "difficulty", "seed"})
        if unknown:
            raise UsageError(f"data_options may set correlation, difficulty and seed, got {unknown}")
        names = [v.name for v in self.variants]
        if "baseline" in names or len(set(names)) != len(names):
            raise UsageError(f"guided variant names must be unique and not 'baseline', got {names}")
        if self.distillation.teacher not in self.models:
            raise UsageError(f"distillation.teacher {self.distillation.teacher!r} is not one of the demo's models "
                             f"{list(self.models)}")

    @classmethod
    def full(cls, seeds: int | None = None) -> DemoSettings:
        """The full demo (default 3 seeds)."""
        return cls() if seeds is None else cls(seeds=seeds)

    @classmethod
    def quick(cls, seeds: int | None = None) -> DemoSettings:
        """A smoke run of every stage: 1 seed, fewer and smaller splits, fewer epochs."""
        return cls(seeds=1 if seeds is None else seeds, train_images=512, test_images=200, baseline_epochs=3,
                   guided_epochs=1, explain_per_group=1, distillation=DistillationSettings(epochs=1), smoke=True)

    @property
    def models(self) -> tuple[str, ...]:
        """The model names in report order: the baseline, then the guided variants."""
        return ("baseline", *(v.name for v in self.variants))

    @property
    def recipe(self) -> GuidanceRecipe:
        """How every training of the demo runs (baseline and guided fine-tunings)."""
        return GuidanceRecipe(model=self.model, model_kwargs=dict(self.model_kwargs), batch_size=self.batch_size,
                              crop_scale=list(self.crop_scale), baseline_epochs=self.baseline_epochs,
                              baseline_lr=self.baseline_lr, guided_epochs=self.guided_epochs,
                              guided_lr=self.guided_lr, train_images=self.train_images, test_images=self.test_images,
                              select="worst_group_accuracy", min_annotated_per_batch=self.min_annotated_per_batch)

    @property
    def data(self) -> DataVariant:
        """The benchmark variant the demo trains on."""
        options = {"correlation": 1.0, "difficulty": 0.5, "seed": 0, **self.data_options}
        return DataVariant(options["correlation"], options["difficulty"], options["seed"], self.image_size)

    def dataset_options(self, split: str) -> dict[str, Any]:
        """Options of ``load_dataset`` for ``split`` (train, val or test)."""
        return self.recipe.data_options(self.data, split)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
