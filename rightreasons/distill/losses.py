"""The loss terms of knowledge distillation and e²KD (thesis eq. 8.1–8.3 and E.1).

Every function takes the student first and the teacher second, like PyTorch's ``loss(input, target)``.

* :func:`kd_loss` — logit distillation ``τ² · KL(p_T(τ) ‖ p_S(τ))`` with ``p(τ) = softmax(z / τ)``, mean over samples.
  The ``τ²`` keeps the gradient scale independent of the temperature (Hinton et al.).
* :func:`multilabel_kd_loss` — multi-label distillation (VOC/COCO, [YXZ⁺23] with the thesis' temperature):
  ``τ · Σ_j KL([σ(z_T,j/τ), 1 − σ(z_T,j/τ)] ‖ [σ(z_S,j/τ), 1 − σ(z_S,j/τ)])``, mean over samples.
* :func:`explanation_loss` — the e²KD term ``1 − cos(E_S, E_T)`` of each sample's explanations (flattened), mean over
  samples. Cosine similarity ignores the explanations' scale, so a teacher and a student with differently scaled
  logits can still agree.
* :func:`attention_transfer_loss` — the attention-transfer baseline (AT, Zagoruyko & Komodakis 2017): per layer the
  spatial attention ``a = normalize(mean_c A²)`` and ``½ Σ_layers mean((a_S − a_T)²)``, so that a weight of 1000 is
  the original ``β = 1000``. No ReLU is applied (B-cos features are signed; the thesis' adaptation, app. E.3.2).

Half-precision inputs are promoted to float32 (safe under bf16 autocast); float64 stays float64.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ..metrics.agreement import explanation_similarity

__all__ = ["attention_map", "attention_transfer_loss", "explanation_loss", "kd_loss", "multilabel_kd_loss"]


def _promote(x: Tensor) -> Tensor:
    """float16/bfloat16 → float32; float32 and float64 unchanged."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _check_logits(where: str, student: Tensor, teacher: Tensor, temperature: float) -> None:
    if student.dim() != 2 or student.shape != teacher.shape:
        raise ValueError(f"{where}: student and teacher logits must both be [N, K] of one shape, got "
                         f"{tuple(student.shape)} and {tuple(teacher.shape)}")
    if not temperature > 0:
        raise ValueError(f"{where}: temperature must be > 0, got {temperature!r}")


def kd_loss(student_logits: Tensor, teacher_logits: Tensor, temperature: float = 1.0) -> Tensor:
    """``τ² · KL(softmax(z_T/τ) ‖ softmax(z_S/τ))`` averaged over the N samples of ``[N, K]`` logits."""
    _check_logits("kd_loss", student_logits, teacher_logits, temperature)
    log_p_s = F.log_softmax(_promote(student_logits) / temperature, dim=1)
    log_p_t = F.log_softmax(_promote(teacher_logits) / temperature, dim=1)
    kl = F.kl_div(log_p_s, log_p_t, reduction="batchmean", log_target=True)
    return temperature ** 2 * kl


def multilabel_kd_loss(student_logits: Tensor, teacher_logits: Tensor, temperature: float = 1.0) -> Tensor:
    """``τ · Σ_j KL(Bernoulli(σ(z_T,j/τ)) ‖ Bernoulli(σ(z_S,j/τ)))`` averaged over the N samples of ``[N, K]`` logits.

    Computed from log-sigmoids, so saturated logits stay finite."""
    _check_logits("multilabel_kd_loss", student_logits, teacher_logits, temperature)
    s = _promote(student_logits) / temperature
    t = _promote(teacher_logits) / temperature
    p_t = torch.sigmoid(t)
    kl = (p_t * (F.logsigmoid(t) - F.logsigmoid(s))
          + (1 - p_t) * (F.logsigmoid(-t) - F.logsigmoid(-s)))
    return temperature * kl.sum(1).mean()


def explanation_loss(student_explanations: Tensor, teacher_explanations: Tensor) -> Tensor:
    """``mean_n (1 − cos(E_S[n], E_T[n]))`` for explanations ``[N, ...]`` of one shape (flattened per sample).

    An all-zero explanation has similarity 0 (loss 1), never NaN."""
    return (1 - explanation_similarity(_promote(student_explanations), _promote(teacher_explanations))).mean()


def attention_map(features: Tensor) -> Tensor:
    """AT's spatial attention ``[N, h·w]``: the channel mean of ``features² [N, C, h, w]``, L2-normalised."""
    if features.dim() != 4:
        raise ValueError(f"attention_map: features must be [N, C, h, w], got shape {tuple(features.shape)}")
    return F.normalize(_promote(features).pow(2).mean(1).flatten(1), dim=1)


def attention_transfer_loss(student_features: Sequence[Tensor], teacher_features: Sequence[Tensor]) -> Tensor:
    """``½ Σ_l mean((a_S,l − a_T,l)²)`` over paired layers; a teacher map of another size is average-pooled
    (or bilinearly resized, when smaller) to the student's ``h × w`` first."""
    if len(student_features) != len(teacher_features) or not student_features:
        raise ValueError(f"attention_transfer_loss: need the same, non-zero number of student and teacher layers, "
                         f"got {len(student_features)} and {len(teacher_features)}")
    total = _promote(student_features[0]).new_zeros(())
    for s, t in zip(student_features, teacher_features):
        size = tuple(s.shape[-2:])
        if tuple(t.shape[-2:]) != size:
            t = (F.adaptive_avg_pool2d(t, size) if t.shape[-2] >= size[0] and t.shape[-1] >= size[1]
                 else F.interpolate(t, size=size, mode="bilinear", align_corners=False))
        total = total + (attention_map(s) - attention_map(t)).pow(2).mean()
    return total / 2
