"""Explanation-enhanced knowledge distillation, e²KD (``rightreasons distill`` / ``cache`` / ``analyze shift``).

* :mod:`.config` — the ``teacher`` and ``distill`` sections and :class:`DistillConfig`;
* :mod:`.losses` — KD, multi-label KD, the explanation term ``1 − cos(E_S, E_T)`` and attention transfer;
* :mod:`.explanations` — which explanation a pair compares and the teacher's side of a step;
* :mod:`.objective` — the weighted objective of one step;
* :mod:`.teacher` — loading the frozen teacher, and writing the cache of its explanations;
* :mod:`.cache` — frozen teacher logits and explanations on disk (sharded safetensors with a manifest);
* :mod:`.formats` — how a cache stores its maps: ``float16`` or ``compact`` (8-bit, deflated);
* :mod:`.check` — how faithful a cache is: cached against live explanations under the training augmentation;
* :mod:`.subsets` — limited data: N shots per class;
* :mod:`.task` — :class:`DistillationTask` (registered as ``distill``);
* :mod:`.fidelity` — agreement with the teacher and explanation similarity, as an evaluator;
* :mod:`.recipe` — :class:`DistillationRun`, KD / e²KD / frozen e²KD as a typed one-call config;
* :mod:`.shift` — explanation similarity under diagonal image shifts.
"""

from .cache import CacheCorruptError, CacheMismatchError, ExplanationCache, weights_fingerprint, write_cache
from .check import check_cache
from .config import DistillConfig, DistillSection, EvalDataConfig, TeacherConfig
from .explanations import EXPLANATION_CHOICES, TeacherOutputs, freeze, resolve_explanation, teacher_outputs
from .fidelity import FidelityEvaluator
from .losses import attention_map, attention_transfer_loss, explanation_loss, kd_loss, multilabel_kd_loss
from .objective import DistillObjective, DistillOutput
from .recipe import MODE_LABELS, MODES, DistillationRun, distill_in_process, run_distillation
from .shift import shift_similarity
from .subsets import ShotSubset, few_shot_indices
from .task import DistillationTask
from .teacher import cache_setting, load_teacher, write_teacher_cache

__all__ = [
    "CacheCorruptError", "CacheMismatchError", "DistillConfig", "DistillObjective", "DistillOutput",
    "DistillSection", "DistillationRun", "DistillationTask", "EXPLANATION_CHOICES", "EvalDataConfig",
    "ExplanationCache", "FidelityEvaluator", "MODES", "MODE_LABELS", "ShotSubset", "TeacherConfig",
    "TeacherOutputs", "attention_map", "attention_transfer_loss", "cache_setting", "check_cache", "distill_in_process",
    "explanation_loss", "few_shot_indices", "freeze", "kd_loss", "load_teacher", "multilabel_kd_loss",
    "resolve_explanation", "run_distillation", "shift_similarity", "teacher_outputs", "weights_fingerprint",
    "write_cache", "write_teacher_cache",
]
