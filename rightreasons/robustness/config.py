"""The config of ``rightreasons robust``: a classifier's training config plus the ``robustness`` section, which picks
one of the group-robustness objectives of :mod:`rightreasons.robustness.objectives`. A minimal config::

    output_dir: runs/birds-groupdro
    model: {name: bcos_resnet18, kwargs: {inplanes: 16}}
    data: {name: synthetic-birds, image_size: 32, batch_size: 64, options: {correlation: 0.95}}
    optim: {name: adam, lr: 1.0e-3, epochs: 10, weight_decay: 1.0e-4}
    robustness: {method: groupdro, step_size: 0.01, adjustment: 1.0}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..classification.config import ClassificationConfig
from ..config import expect

__all__ = ["METHODS", "RobustConfig", "RobustnessConfig"]

METHODS = ("reweight", "subsample", "groupdro", "upweight")
"""The training objectives of the ``robustness`` section (DFR is a procedure on a trained model,
:mod:`rightreasons.robustness.dfr`)."""
RobustMethod = Literal[METHODS]  # type: ignore[valid-type]


@dataclass
class RobustnessConfig:
    """Which group-robustness objective trains the classifier (:mod:`rightreasons.robustness.objectives`)."""

    method: RobustMethod = "reweight"
    """`reweight`: every example's loss weighted by `1 / n_g` (its group's size in the training split);
    `subsample`: every group subsampled once (with the run's seed) to the smallest non-empty group's size;
    `groupdro`: online GroupDRO (Sagawa et al. 2020); `upweight`: JTT's second stage (Liu et al. 2021). All but
    `upweight` need the group of every training image."""
    step_size: float = 0.01
    """GroupDRO's η: group weights `q ← q · exp(η · (L_g + C / √n_g))`, normalised, once per optimiser step (on the
    group means of the whole accumulated batch with `optim.grad_accumulation`)."""
    adjustment: float = 0.0
    """GroupDRO's group adjustment `C`, added as `C / √n_g` to the loss of group g (favours small groups)."""
    error_set_from: str | None = None
    """JTT: the finished first-stage (ERM) run, a run directory or model file; the training images it misclassifies
    form the error set. Only with `method: upweight`."""
    upweight: float = 6.0
    """JTT's λ_up: the loss weight of the error set's images (the others weigh 1)."""

    def __post_init__(self) -> None:
        expect(self.step_size > 0, "step_size", self.step_size, "a step size > 0 (GroupDRO's η, e.g. 0.01)")
        expect(self.adjustment >= 0, "adjustment", self.adjustment, "a group adjustment C >= 0")
        expect(self.upweight >= 1, "upweight", self.upweight, "an up-weighting factor λ_up >= 1")
        if self.method == "upweight":
            expect(self.error_set_from is not None and bool(self.error_set_from.strip()), "error_set_from",
                   self.error_set_from, "the directory or model file of the first-stage (ERM) run")
        else:
            expect(self.error_set_from is None, "error_set_from", self.error_set_from,
                   "null (only method: upweight, JTT's second stage, reads a first-stage run)")

    @property
    def uses_group_labels(self) -> bool:
        """Whether training reads the group of every training image (JTT's ``upweight`` does not)."""
        return self.method != "upweight"


@dataclass
class RobustConfig(ClassificationConfig):
    """A classifier trained with a group-robustness objective (``rightreasons robust``)."""

    robustness: RobustnessConfig = field(default_factory=RobustnessConfig)
