"""Explanation-enhanced knowledge distillation, e²KD (thesis ch. 8): the building blocks.

* :mod:`.losses` — KD, multi-label KD, the explanation term ``1 − cos(E_S, E_T)`` and attention transfer;
* :mod:`.explanations` — which explanation a pair compares and the teacher's side of a step;
* :mod:`.objective` — the weighted objective of one step;
* :mod:`.cache` — frozen teacher logits and explanations on disk (sharded float16 safetensors with a manifest);
* :mod:`.evaluation` — agreement with the teacher and explanation similarity, as an evaluator;
* :mod:`.shift` — explanation similarity under diagonal image shifts (``rightreasons analyze shift``);
* :mod:`.subsets` — limited data: N shots per class.

Distillation runs on the engine as :class:`rightreasons.tasks.DistillationTask`; one-call recipes are in
:mod:`rightreasons.experiments.distillation`.
"""

from .cache import CacheCorruptError, CacheMismatchError, ExplanationCache, weights_fingerprint, write_cache
from .evaluation import FidelityEvaluator
from .explanations import EXPLANATION_CHOICES, TeacherOutputs, freeze, resolve_explanation, teacher_outputs
from .losses import attention_map, attention_transfer_loss, explanation_loss, kd_loss, multilabel_kd_loss
from .objective import DistillObjective, DistillOutput
from .shift import shift_similarity
from .subsets import ShotSubset, few_shot_indices

__all__ = [
    "EXPLANATION_CHOICES", "CacheCorruptError", "CacheMismatchError", "DistillObjective", "DistillOutput",
    "ExplanationCache", "FidelityEvaluator", "ShotSubset", "TeacherOutputs", "attention_map",
    "attention_transfer_loss", "explanation_loss", "few_shot_indices", "freeze", "kd_loss", "multilabel_kd_loss",
    "resolve_explanation", "shift_similarity", "teacher_outputs", "weights_fingerprint", "write_cache",
]
