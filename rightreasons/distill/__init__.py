"""Explanation-enhanced knowledge distillation, e²KD (thesis ch. 8, SCIENCE.md §7).

* :mod:`.losses` — KD, multi-label KD, the explanation term ``1 − cos(E_T, E_S)`` and attention transfer;
* :mod:`.explanations` — the explanations compared (B-cos ``W(x)``, GradCAM) and the teacher's side of a step;
* :mod:`.objective` — the weighted objective of one step;
* :mod:`.cache` — frozen teacher logits and explanations on disk (sharded float16 safetensors with a manifest);
* :mod:`.trainer` / :mod:`.schema` — distillation on the training engine (``rightreasons distill`` / ``cache``);
* :mod:`.evaluation` — agreement with the teacher and explanation similarity;
* :mod:`.shift` — explanation similarity under diagonal image shifts (``rightreasons analyze shift``);
* :mod:`.demo` — :func:`run_distillation`, one KD / e²KD / frozen-e²KD run on the synthetic benchmark, and
  :func:`compare_step_times` (live vs frozen step cost).
"""

from .cache import CacheCorruptError, CacheError, CacheMismatchError, ExplanationCache, weights_fingerprint, write_cache
from .demo import compare_step_times, run_distillation
from .evaluation import evaluate_fidelity
from .explanations import TeacherOutputs, model_explanation, reencode, resolve_kind, teacher_outputs
from .losses import attention_map, attention_transfer_loss, explanation_loss, kd_loss, multilabel_kd_loss
from .objective import DistillObjective, DistillOutput
from .schema import DistillConfig, DistillSection, EvalDataConfig, TeacherConfig
from .shift import shift_similarity, save_shift_plot
from .subsets import ShotSubset, few_shot_indices
from .trainer import DistillTrainer, cache_setting, distill, load_teacher, write_teacher_cache

__all__ = [
    "CacheCorruptError", "CacheError", "CacheMismatchError", "DistillConfig", "DistillObjective", "DistillOutput",
    "DistillSection", "DistillTrainer", "EvalDataConfig", "ExplanationCache", "ShotSubset", "TeacherConfig",
    "TeacherOutputs", "attention_map", "attention_transfer_loss", "cache_setting", "compare_step_times", "distill",
    "evaluate_fidelity", "explanation_loss", "few_shot_indices", "kd_loss", "load_teacher", "model_explanation",
    "multilabel_kd_loss", "reencode", "resolve_kind", "run_distillation", "save_shift_plot",
    "shift_similarity", "teacher_outputs", "weights_fingerprint", "write_cache", "write_teacher_cache",
]
