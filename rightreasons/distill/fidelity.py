"""Distillation fidelity (thesis §8.1.2): how closely the student follows its teacher, as an evaluator of the one
evaluation loop (:func:`rightreasons.metrics.evaluation.evaluate`).

* ``agreement`` — top-1 agreement of student and teacher (eq. 8.4), with ``agreement/<group>`` and
  ``worst_group_agreement`` on data with groups;
* ``explanation_similarity`` — mean cosine similarity of student and teacher explanations for the teacher's top-1
  class (the explanation e²KD compares);
* ``teacher_accuracy`` (and per group) on single-label data, for reference;
* on Waterbirds-style data (the groups G1–G4 of :data:`~rightreasons.data.GROUP_NAMES`): ``ood_accuracy`` /
  ``ood_agreement`` over the out-of-distribution groups (G2 landbird on water, G3 waterbird on land) and
  ``id_accuracy`` / ``id_agreement`` over G1 and G4.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ..data import GROUP_NAMES
from ..encoding import reencode
from ..metrics.evaluation import plain_numbers
from ..explain import attribute
from ..models import capabilities
from ..metrics import Agreement, ExplanationSimilarity, GroupAccuracy
from .explanations import teacher_outputs

__all__ = ["OOD_GROUPS", "FidelityEvaluator"]

#: Waterbirds groups whose background contradicts the bird (G2 landbird/water, G3 waterbird/land)
OOD_GROUPS = (1, 2)
_SPLITS = ["id", "ood"]


class FidelityEvaluator:
    """Agreement, explanation similarity and teacher accuracy of the evaluated (student) model against ``teacher``.

    Args:
        teacher: the teacher, on the evaluation device (put in eval mode here).
        method: the explanation compared (a method name, or ``"none"`` to skip the similarity).
        layer: where ``method`` explains.
        group_names: the dataset's group names for per-group numbers (single-label data), or ``None``; with the
            Waterbirds groups the in-/out-of-distribution split of :data:`OOD_GROUPS` is added.
        multilabel: multi-label data (no accuracy, no groups).

    Batches come encoded for the evaluated model and are re-encoded for the teacher (each model's input encoding is
    one of its capabilities).
    """

    def __init__(self, teacher: nn.Module, *, method: str, layer: str, group_names: Sequence[str] | None = None,
                 multilabel: bool = False) -> None:
        self.teacher, self.method, self.layer = teacher.eval(), method, layer
        self.teacher_encoding = capabilities(teacher).encoding
        self.multilabel = multilabel
        self.grouped = bool(group_names) and not multilabel
        names = list(group_names) if self.grouped else None
        count = len(names) if names else 1
        self.agreement = Agreement(count, names)
        self.teacher_accuracy = GroupAccuracy(count, names)
        self.waterbirds = self.grouped and tuple(group_names) == GROUP_NAMES
        self.split_agreement = Agreement(2, _SPLITS)
        self.split_accuracy = GroupAccuracy(2, _SPLITS)
        self.similarity = ExplanationSimilarity()

    def _metrics(self) -> list[Any]:
        return [self.agreement, self.teacher_accuracy, self.split_agreement, self.split_accuracy, self.similarity]

    def update(self, model: nn.Module, batch: dict[str, Any], logits: Tensor) -> None:
        device = logits.device
        for metric in self._metrics():
            metric.to(device, non_blocking=True)
        images, labels = batch["image"], batch["labels"]
        groups = batch.get("host", batch)["group"] if self.grouped else None  # checked on the host
        images_for_teacher = reencode(images, capabilities(model).encoding, self.teacher_encoding)
        teacher = teacher_outputs(self.teacher, images_for_teacher, self.method, self.layer)
        if self.method != "none":
            student = attribute(model, images, teacher.target, self.method, self.layer)
            self.similarity.update(student.explanation, teacher.explanations)
        self.agreement.update(logits, teacher.logits, groups)
        if not self.multilabel:
            self.teacher_accuracy.update(teacher.logits, labels.argmax(1), groups)
        if self.waterbirds:
            ood = torch.isin(groups, torch.tensor(OOD_GROUPS, device=groups.device)).long()
            self.split_agreement.update(logits, teacher.logits, ood)
            self.split_accuracy.update(logits, labels.argmax(1), ood)

    def compute(self) -> dict[str, Any]:
        results = {k: v for k, v in plain_numbers(self.agreement.compute()).items() if k != "worst_group"}
        if not self.multilabel:
            results.update({k: v for k, v in plain_numbers(self.teacher_accuracy.compute(), "teacher_").items()
                            if k != "teacher_worst_group"})
        if self.method != "none":
            results["explanation_similarity"] = self.similarity.compute().item()
        if self.waterbirds:
            for metric, name in ((self.split_agreement, "agreement"), (self.split_accuracy, "accuracy")):
                values = plain_numbers(metric.compute())
                results.update({f"{part}_{name}": values[f"{name}/{part}"] for part in _SPLITS
                                if f"{name}/{part}" in values})
        return results
