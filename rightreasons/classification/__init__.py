"""Training and scoring a classifier of the zoo (``rightreasons train`` / ``evaluate``), and what every feature that
trains a classifier builds on.

* :mod:`.config` — :class:`ClassificationConfig`: the engine's run config plus the model, the classification loss,
  the B ramp and the localisation metrics of validation;
* :mod:`.loss` — the classification loss (BCE or softmax cross-entropy) and the class probabilities it implies;
* :mod:`.task` — :class:`ClassificationTask` (registered as ``train``);
* :mod:`.hooks` — the B ramp of B-cosified models and the explanation images of validation;
* :mod:`.scoring` — :func:`score_checkpoint`, any artefact of a run on a split, :func:`trained_model` and
  :func:`trained_architecture`;
* :mod:`.recipe` — :class:`TrainingRun`, the B-cos recipe as a typed one-call config.
"""

from .config import ClassificationConfig, EvalConfig, LossConfig, ModelConfig, OptimConfig
from .loss import class_probabilities, classification_loss, resolve_classification_loss
from .recipe import TrainingRun, run_training
from .scoring import score_checkpoint, trained_architecture, trained_model
from .task import ClassificationTask

__all__ = ["ClassificationConfig", "ClassificationTask", "EvalConfig", "LossConfig", "ModelConfig", "OptimConfig",
           "TrainingRun", "class_probabilities", "classification_loss", "resolve_classification_loss", "run_training",
           "score_checkpoint", "trained_architecture", "trained_model"]
