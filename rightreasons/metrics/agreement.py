"""Teacher–student fidelity metrics for distillation: top-1 agreement (overall and per group) and the cosine
similarity of student and teacher explanations. Every function takes the student first, the teacher second.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from .base import GroupedRate, PerSampleMean, top1

__all__ = ["Agreement", "ExplanationSimilarity", "explanation_similarity", "top1_agreement"]


def top1_agreement(student: Tensor, teacher: Tensor) -> Tensor:
    """Per sample ``[N]`` bool: do student and teacher predict the same class?

    Each of ``student`` and ``teacher`` is scores ``[N, K]`` (argmax is taken) or integer classes ``[N]``.
    """
    s = top1(student, "top1_agreement", "student")
    t = top1(teacher, "top1_agreement", "teacher")
    if s.shape != t.shape:
        raise ValueError(f"top1_agreement: student and teacher must describe the same N samples, "
                         f"got {tuple(student.shape)} and {tuple(teacher.shape)}")
    return s == t


def explanation_similarity(student: Tensor, teacher: Tensor) -> Tensor:
    """Cosine similarity ``[N]`` of student and teacher explanations ``[N, ...]``, each flattened per sample.

    Finite for all-zero maps: the norm product is clamped at 1e-8, so a zero map has similarity 0.
    """
    if teacher.shape != student.shape or teacher.dim() < 2:
        raise ValueError(f"explanation_similarity: student and teacher explanations must share a shape [N, ...], "
                         f"got {tuple(student.shape)} and {tuple(teacher.shape)}")
    return F.cosine_similarity(student.flatten(1), teacher.flatten(1), dim=1, eps=1e-8)


class Agreement(GroupedRate):
    """Top-1 teacher–student agreement overall, per group and in the worst group.

    ``update(student, teacher, groups=None)`` (scores ``[N, K]`` or classes ``[N]``); ``compute()`` returns
    ``agreement``, ``worst_group_agreement``, ``worst_group`` and ``agreement/<group name>`` per group seen.
    """

    rate_name = "agreement"

    def update(self, student: Tensor, teacher: Tensor, groups: Tensor | None = None) -> None:
        self._add(top1_agreement(student.detach(), teacher.detach()), groups)


class ExplanationSimilarity(PerSampleMean):
    """Mean :func:`explanation_similarity` over all samples passed to ``update(student, teacher)``."""

    def score(self, student: Tensor, teacher: Tensor) -> Tensor:
        return explanation_similarity(student, teacher)

