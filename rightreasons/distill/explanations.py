"""The teacher's side of a distillation step, and which explanation a teacher–student pair compares.

Explanations come from :func:`rightreasons.explain.attribute` (any method of :mod:`rightreasons.explain.methods`;
e²KD compares :attr:`~rightreasons.explain.Attribution.explanation`). By default (``"auto"``) a pair of B-cos models
compares ``W(x)`` (``bcos_weights``, ``[N, C_in, H, W]``) and a pair of standard models positive GradCAM of the last
stage (``[N, 1, H, W]``); a mixed pair must choose. On the teacher's side nothing keeps a graph and no parameter
gradient exists (the teacher is frozen, :func:`freeze`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..errors import UsageError
from ..explain import METHOD_NAMES, attribute, capture_outputs, layer_for

__all__ = ["EXPLANATION_CHOICES", "TeacherOutputs", "freeze", "resolve_explanation", "teacher_outputs"]

EXPLANATION_CHOICES: tuple[str, ...] = ("auto", "none", *METHOD_NAMES)
"""Values of ``distill.explanation``: a method name, ``auto`` (see :func:`resolve_explanation`) or ``none``."""


def freeze(model: nn.Module) -> nn.Module:
    """Put a teacher in eval mode with no parameter gradients (returns the model)."""
    return model.eval().requires_grad_(False)


def resolve_explanation(choice: str, teacher_bcos: bool, student_bcos: bool | None = None) -> str:
    """The method name (or ``"none"``) that ``choice`` (one of :data:`EXPLANATION_CHOICES`) means for a pair.

    ``auto``: ``bcos_weights`` when teacher and student are B-cos models, ``gradcam`` when both are standard; a mixed
    pair must choose (``gradcam`` works for both families' CNNs, ``none`` distils logits only). ``student_bcos=None``
    decides by the teacher alone (a cache of teacher explanations)."""
    if choice not in EXPLANATION_CHOICES:
        raise UsageError(f"unknown explanation {choice!r}; expected one of {list(EXPLANATION_CHOICES)}")
    if choice != "auto":
        return choice
    if student_bcos is not None and student_bcos != teacher_bcos:
        raise UsageError("distill.explanation=auto needs teacher and student of one family (both B-cos or both "
                         "standard); for a mixed pair set distill.explanation to 'gradcam' or 'none'")
    return "bcos_weights" if teacher_bcos else "gradcam"


@dataclass
class TeacherOutputs:
    """What the teacher contributes to a step (all detached).

    Attributes:
        logits: ``[N, K]`` teacher logits.
        explanations: the explanations of the teacher's top-1 classes (``Attribution.explanation``), or ``None``.
        features: outputs of the attention-transfer layers (empty unless requested).
    """

    logits: Tensor
    explanations: Tensor | None = None
    features: list[Tensor] = field(default_factory=list)

    @property
    def target(self) -> Tensor:
        """``[N]`` the teacher's top-1 class per sample (the highest-scoring class for multi-label tasks)."""
        return self.logits.argmax(1)


def teacher_outputs(teacher: nn.Module, images: Tensor, method: str = "none", layer: str = "final",
                    at_layers: Sequence[str] = (), grad_scale: float | Tensor = 1.0) -> TeacherOutputs:
    """Run the (frozen, eval-mode) teacher on ``images`` encoded for it: logits, the ``method`` explanation of its
    top-1 class at ``layer`` (the input for input-only methods; none for ``"none"``), and the outputs of
    ``at_layers``. No graph is kept. ``grad_scale``: the loss scale of a float16 step, which seeds the explanation's
    backward (:func:`~rightreasons.explain.attribute`)."""
    with capture_outputs(teacher, at_layers) as features:
        if method == "none":
            with torch.no_grad():
                logits, explanations = teacher(images), None
        else:
            result = attribute(teacher, images, None, method, layer_for(method, layer), grad_scale=grad_scale)
            logits, explanations = result.logits, result.explanation
    return TeacherOutputs(logits.detach(), None if explanations is None else explanations.detach(),
                          [f[-1].detach() for f in features])
