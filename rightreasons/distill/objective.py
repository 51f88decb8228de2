"""The student's objective in one distillation step (thesis eq. 8.2)::

    L = w_logit · L_KD  +  λ · (1 − cos(E_S, E_T))  +  w_gt · L_class  +  w_AT · L_AT

with the explanations taken for the teacher's top-1 class. ``λ = 0`` is plain KD (the baseline), ``λ > 0`` e²KD;
the released e²KD configs put no weight on the ground truth (``w_gt = 0``); the attention-transfer baseline follows its
paper with ground truth and AT (``w_logit = 0``, ``w_gt = 1``, ``w_AT = 1000``).

The student runs one forward pass: with ``λ > 0`` it is the forward of :func:`rightreasons.explain.attribute` with
``create_graph=True``, whose logits also feed the KD and ground-truth terms, so the whole objective needs a single
``backward``. The terms are returned unweighted (for logging) together with the weighted total. The teacher's part
(logits, explanations, features) comes in as detached :class:`TeacherOutputs`, computed live or read from a cache of
frozen explanations.

With ``compile`` (a run's ``torch.compile`` backend) an e²KD step is compiled whole — the student's forward, its
explanation, the terms and the parameters' backward (:class:`~rightreasons.explain.CompiledStep`, on the functional
route of :func:`~rightreasons.explain.functional_attribute`), for ``bcos_weights`` (or ``bcos``) at the input. What the
functional route does not cover (other methods, attention transfer's hooks, DDP, synchronised or foreign BatchNorm,
checkpointed stages) runs as without ``compile``, with a warning that says why; so do the steps without the e²KD
term, whose plain forward is the compiled model's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from torch import Tensor, nn

from ..errors import UsageError
from ..explain import METHOD_NAMES, CompiledStep, attribute, capture_outputs, functional_attribute, layer_for
from .explanations import TeacherOutputs
from .losses import attention_transfer_loss, explanation_loss, kd_loss, multilabel_kd_loss

__all__ = ["LOGIT_LOSSES", "DistillObjective", "DistillOutput", "LogitLossName"]

LOGIT_LOSSES: dict[str, Callable[[Tensor, Tensor, float], Tensor]] = {
    "kd": kd_loss, "multilabel": multilabel_kd_loss}
"""The logit terms by name: softmax KD and per-class binary KD."""
LogitLossName = Literal[("auto", *LOGIT_LOSSES)]  # type: ignore[valid-type]
"""The type of ``distill.logit_loss``: a logit term, or ``auto`` (by the data: multi-label or not)."""


@dataclass
class DistillOutput:
    """What :class:`DistillObjective` returns: the named terms (unweighted, for logging), the weighted total to
    back-propagate, the student's logits ``[N, K]`` and its explanations (``None`` without the e²KD term)."""

    terms: dict[str, Tensor]
    total: Tensor
    logits: Tensor
    explanations: Tensor | None


@dataclass
class DistillObjective:
    """The loss of a distillation step.

    Args:
        method: the explanation compared by the e²KD term (a method of :mod:`rightreasons.explain.methods`, e.g.
            ``bcos_weights`` or ``gradcam``; ``none`` forbids ``λ > 0``).
        layer: where the method explains (``final`` = the last stage; ignored by input-only methods).
        logit_loss: ``kd`` (softmax KD) or ``multilabel`` (per-class binary KD).
        temperature: τ of the logit loss.
        logit_weight, explanation_weight, gt_weight, at_weight: the weights of the four terms.
        at_layers: student/teacher layers matched by attention transfer.
        classification: ``(logits, labels) -> loss`` for the ground-truth term (needed when ``gt_weight > 0``).
        compile: the ``torch.compile`` backend of an e²KD step (``compile`` of the run; module docstring), ``"no"``:
            eager.

    ``compiled`` is an e²KD step compiled whole (:class:`~rightreasons.explain.CompiledStep`; its ``fn`` takes the
    bare student, the images, the teacher's logits and explanations, the labels and ``grad_scale``).
    """

    method: str = "bcos_weights"
    layer: str = "final"
    logit_loss: str = "kd"
    temperature: float = 1.0
    logit_weight: float = 1.0
    explanation_weight: float = 1.0
    gt_weight: float = 0.0
    at_weight: float = 0.0
    at_layers: Sequence[str] = ("mid1", "mid2", "mid3", "final")
    classification: Callable[[Tensor, Tensor], Tensor] | None = None
    compile: str = "no"

    def __post_init__(self) -> None:
        if self.logit_loss not in LOGIT_LOSSES:
            raise ValueError(f"unknown logit loss {self.logit_loss!r}; expected one of {list(LOGIT_LOSSES)}")
        weights = {"logit_weight": self.logit_weight, "explanation_weight": self.explanation_weight,
                   "gt_weight": self.gt_weight, "at_weight": self.at_weight}
        negative = {k: v for k, v in weights.items() if not v >= 0}
        if negative:
            raise ValueError(f"distillation loss weights must be >= 0, got {negative}")
        if self.explanation_weight > 0 and self.method not in METHOD_NAMES:
            raise UsageError(f"the e²KD term (explanation_weight={self.explanation_weight}) needs an explanation "
                             f"method, one of {list(METHOD_NAMES)}; got {self.method!r}")
        self.layer = layer_for(self.method, self.layer)
        if self.gt_weight > 0 and self.classification is None:
            raise ValueError("gt_weight > 0 needs a classification loss function")
        if self.at_weight > 0 and not self.at_layers:
            raise ValueError("at_weight > 0 needs at least one layer in at_layers")
        hooks = "attention transfer captures layer outputs by hooks" if self.at_weight > 0 else None
        self.compiled = CompiledStep(self._explained_terms, self.compile, "e²KD step", self.method, self.layer, hooks)

    @property
    def needs_teacher_explanations(self) -> bool:
        return self.explanation_weight > 0

    @property
    def teacher_at_layers(self) -> tuple[str, ...]:
        """The teacher layers whose features the step needs (empty without attention transfer)."""
        return tuple(self.at_layers) if self.at_weight > 0 else ()

    def __call__(self, student: nn.Module, images: Tensor, teacher: TeacherOutputs,
                 labels: Tensor | None = None, explain: bool = True, grad_scale: float | Tensor = 1.0) -> DistillOutput:
        """The objective of ``student`` on ``images [N, C, H, W]`` (its own encoding) given the teacher's outputs
        on the same images; ``labels [N, K]`` feed the ground-truth term. ``explain=False`` leaves the e²KD term out
        of this step (``distill.explanation_every``): a plain student forward, no teacher explanations needed.
        ``grad_scale``: the loss scale of a float16 step, which seeds the explanation's backward
        (:func:`~rightreasons.explain.attribute`)."""
        explain = explain and self.needs_teacher_explanations
        if explain and teacher.explanations is None:
            raise ValueError("the e²KD term needs the teacher's explanations, but TeacherOutputs.explanations is None")
        if self.at_weight > 0 and len(teacher.features) != len(self.at_layers):
            raise ValueError(f"attention transfer needs teacher features of {list(self.at_layers)}, got "
                             f"{len(teacher.features)}")
        if self.gt_weight > 0 and labels is None:
            raise ValueError("gt_weight > 0 needs the batch's labels")
        if explain and self.compiled.runs(student):  # compiled whole (module docstring)
            terms, total, logits, explanations = self.compiled(student, images, teacher.logits,
                                                                teacher.explanations, labels, grad_scale)
            return DistillOutput(terms=terms, total=total, logits=logits, explanations=explanations)
        with capture_outputs(student, self.at_layers if self.at_weight > 0 else ()) as features:
            if explain:
                result = attribute(student, images, teacher.target, self.method, self.layer, create_graph=True,
                                   grad_scale=grad_scale)
                logits, explanations = result.logits, result.explanation
            else:
                logits, explanations = student(images), None
        terms, total = self._terms(logits, explanations, teacher, labels, [f[-1] for f in features])
        return DistillOutput(terms=terms, total=total, logits=logits, explanations=explanations)

    def _terms(self, logits: Tensor, explanations: Tensor | None, teacher: TeacherOutputs, labels: Tensor | None,
               features: Sequence[Tensor]) -> tuple[dict[str, Tensor], Tensor]:
        """The named terms and their weighted total from the student's ``logits [N, K]``, its ``explanations``
        (``None``: no e²KD term) and the ``features`` of its attention-transfer layers."""
        terms = {"kd": LOGIT_LOSSES[self.logit_loss](logits, teacher.logits, self.temperature)}
        total = self.logit_weight * terms["kd"]
        if explanations is not None:
            terms["explanation"] = explanation_loss(explanations, teacher.explanations)
            total = total + self.explanation_weight * terms["explanation"]
        if self.gt_weight > 0:
            terms["classification"] = self.classification(logits.float(), labels)
            total = total + self.gt_weight * terms["classification"]
        if self.at_weight > 0:
            terms["attention"] = attention_transfer_loss(features, teacher.features)
            total = total + self.at_weight * terms["attention"]
        return terms, total

    def _explained_terms(self, student: nn.Module, images: Tensor, teacher_logits: Tensor,
                         teacher_explanations: Tensor, labels: Tensor | None,
                         grad_scale: float | Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor]:
        """The device part of an e²KD step compiled whole: the terms, their total, the logits and the explanations
        of the bare ``student`` on ``images``, explained for the teacher's top-1 classes."""
        teacher = TeacherOutputs(teacher_logits, teacher_explanations)
        result = functional_attribute(student, images, teacher.target, self.method, grad_scale=grad_scale)
        terms, total = self._terms(result.logits, result.explanation, teacher, labels, ())
        return terms, total, result.logits, result.explanation
