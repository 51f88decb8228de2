"""How a group-robust training trains: :class:`RobustRun`, the classifier's training recipe
(:class:`~rightreasons.classification.TrainingRun`) plus the ``robustness`` section; and :class:`RobustVariant`, one
method of the robustness study with its hyper-parameters and the annotations it needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..classification.recipe import TrainingRun
from ..config import construct, expect
from .config import RobustConfig, RobustnessConfig

__all__ = ["RobustRun", "RobustVariant", "STUDY_METHODS"]

STUDY_METHODS = ("reweight", "subsample", "groupdro", "jtt")
"""The trained methods of the study (ERM is its baseline; DFR retrains the last layer of trained runs)."""


@dataclass
class RobustRun(TrainingRun):
    """A :class:`~rightreasons.classification.TrainingRun` with a group-robustness objective ``robustness``."""

    robustness: RobustnessConfig = field(default_factory=RobustnessConfig)

    def config(self) -> RobustConfig:
        """The full config this recipe stands for."""
        return construct(lambda: RobustConfig(**self.sections(), robustness=self.robustness))


@dataclass(frozen=True)
class RobustVariant:
    """One trained method of the robustness study: ``method`` (``reweight``, ``subsample``, ``groupdro`` or ``jtt``)
    with GroupDRO's ``step_size`` η and ``adjustment`` C, JTT's first-stage epochs T (``first_stage_epochs``) and
    ``upweight`` λ_up."""

    name: str
    method: Literal[STUDY_METHODS]  # type: ignore[valid-type]
    step_size: float = 0.01
    adjustment: float = 0.0
    upweight: float = 6.0
    first_stage_epochs: int = 1

    def __post_init__(self) -> None:
        expect(bool(self.name.strip()) and self.name != "baseline", "name", self.name,
               "a name other than 'baseline'")
        expect(self.first_stage_epochs >= 1, "first_stage_epochs", self.first_stage_epochs, "an integer >= 1")

    def section(self, error_set_from: str | None = None) -> RobustnessConfig:
        """The ``robustness`` section of its training (JTT: the second stage, up-weighting ``error_set_from``'s
        errors)."""
        method = "upweight" if self.method == "jtt" else self.method
        return construct(RobustnessConfig, method, step_size=self.step_size, adjustment=self.adjustment,
                         upweight=self.upweight, error_set_from=error_set_from, key="robustness")

    def group_labels(self, train_images: int) -> int:
        """Training images whose group label the method reads: all of them, except for JTT (none)."""
        return 0 if self.method == "jtt" else train_images
