"""Typed recipes above the library: one call for a training, a guided fine-tuning or a distillation, and
side-by-side step timings. Each recipe is a dataclass that can be loaded from YAML
(:func:`rightreasons.config.load_config`) and expands to a full engine config.

* :mod:`.training` — :class:`TrainingRun` / :func:`run_training` (baseline or box-guided);
* :mod:`.distillation` — :class:`DistillationRun` / :func:`run_distillation` (KD, e²KD, frozen e²KD);
* :mod:`.timing` — :func:`compare_step_times`;
* :mod:`.guidance_study` — :class:`GuidanceStudy` / :func:`run_study` (``rightreasons study guidance``).

The demo (:mod:`rightreasons.demo`) and the studies in ``scripts/`` are built from these.
"""

from .distillation import MODE_LABELS, MODES, DistillationRun, run_distillation
from .guidance_study import DataVariant, GuidanceRecipe, GuidanceStudy, GuidedVariant, run_study
from .timing import compare_step_times
from .training import TrainingRun, run_training

__all__ = ["MODES", "MODE_LABELS", "DataVariant", "DistillationRun", "GuidanceRecipe", "GuidanceStudy", "GuidedVariant",
           "TrainingRun", "compare_step_times", "run_distillation", "run_study", "run_training"]
