"""Distillation fidelity on an evaluation set (thesis §8.1.2): how closely the student follows its teacher.

* ``agreement`` — top-1 agreement of student and teacher (eq. 8.4), with ``agreement/<group>`` and
  ``worst_group_agreement`` on data with groups;
* ``explanation_similarity`` — mean cosine similarity of teacher and student explanations for the teacher's top-1
  class (the kind e²KD compares);
* ``teacher_accuracy`` (and per group) on single-label data, for reference;
* on Waterbirds-style data (the groups G1–G4 of :data:`~rightreasons.data.GROUP_NAMES`): ``ood_accuracy`` / ``ood_agreement`` over the out-of-distribution
  groups (G2 landbird on water, G3 waterbird on land) and ``id_accuracy`` / ``id_agreement`` over G1 and G4.

The student's accuracy, EPG and IoU come from the engine's :func:`~rightreasons.engine.evaluation.evaluate_classifier`.
Each process scores its shard of the set; torchmetrics sums the counts across processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Subset

from ..data import GROUP_NAMES, collate
from ..engine.data import shard_indices
from ..metrics import Agreement, ExplanationSimilarity, GroupAccuracy
from .explanations import ExplanationKind, model_explanation, reencode, teacher_outputs

__all__ = ["OOD_GROUPS", "evaluate_fidelity"]

#: Waterbirds groups whose background contradicts the bird (G2 landbird/water, G3 waterbird/land)
OOD_GROUPS = (1, 2)
_SPLIT_NAMES = ["id", "ood"]


def _plain(results: dict[str, Tensor], prefix: str = "") -> dict[str, Any]:
    """Python numbers of a metric's results, without the index of its worst group, keys prefixed."""
    return {f"{prefix}{k}": v.item() if v.numel() == 1 else v.tolist()
            for k, v in ((k, v.detach().cpu()) for k, v in results.items()) if k != "worst_group"}


@torch.no_grad()
def evaluate_fidelity(student: nn.Module, teacher: nn.Module, dataset: Dataset, *, kind: ExplanationKind,
                      layer: str = "final", student_encoding: str, teacher_encoding: str, batch_size: int,
                      device: torch.device, rank: int = 0, world_size: int = 1,
                      group_names: Sequence[str] | None = None, multilabel: bool = False) -> dict[str, Any]:
    """Agreement, explanation similarity and teacher accuracy of ``student`` vs ``teacher`` on ``dataset``
    (samples encoded for the student). Puts the student in eval mode; the caller restores train mode.

    ``group_names``: names of the dataset's groups (``sample["group"]``) for per-group numbers (single-label data);
    with the Waterbirds groups the in-/out-of-distribution split of :data:`OOD_GROUPS` is added. ``kind="none"`` skips the
    explanation similarity."""
    student.eval()
    teacher.eval()
    groups_used = bool(group_names) and not multilabel
    num_groups = len(group_names) if groups_used else 1
    agreement = Agreement(num_groups, list(group_names) if groups_used else None).to(device)
    teacher_accuracy = GroupAccuracy(num_groups, list(group_names) if groups_used else None).to(device)
    waterbirds = groups_used and tuple(group_names) == GROUP_NAMES
    split_agreement = Agreement(2, _SPLIT_NAMES).to(device)
    split_accuracy = GroupAccuracy(2, _SPLIT_NAMES).to(device)
    similarity = ExplanationSimilarity().to(device)
    shard = Subset(dataset, shard_indices(len(dataset), rank, world_size))
    for batch in DataLoader(shard, batch_size=batch_size, shuffle=False, collate_fn=collate):
        images, labels = batch["image"].to(device), batch["labels"].to(device)
        groups = batch["group"].to(device) if groups_used else None
        teacher_out = teacher_outputs(teacher, reencode(images, student_encoding, teacher_encoding), kind, layer)
        if kind == "none":
            student_logits = student(images)
        else:
            student_logits, explanations = model_explanation(student, images, teacher_out.target, kind, layer)
            similarity.update(teacher_out.explanations, explanations)
        agreement.update(student_logits, teacher_out.logits, groups)
        if not multilabel:
            teacher_accuracy.update(teacher_out.logits, labels.argmax(1), groups)
        if waterbirds:
            ood = torch.isin(groups, torch.tensor(OOD_GROUPS, device=device)).long()
            split_agreement.update(student_logits, teacher_out.logits, ood)
            split_accuracy.update(student_logits, labels.argmax(1), ood)
    results = _plain(agreement.compute())
    if not multilabel:
        results.update(_plain(teacher_accuracy.compute(), prefix="teacher_"))
    if kind != "none":
        results["explanation_similarity"] = similarity.compute().item()
    if waterbirds:
        for metric, name in ((split_agreement, "agreement"), (split_accuracy, "accuracy")):
            values = _plain(metric.compute())
            results.update({f"{part}_{name}": values[f"{name}/{part}"] for part in _SPLIT_NAMES
                            if f"{name}/{part}" in values})
    return results
