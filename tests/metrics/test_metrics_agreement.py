"""Teacher–student agreement and explanation cosine similarity: hand-computed values, zero maps, accumulation."""

import math

import pytest
import torch

from rightreasons.metrics import Agreement, ExplanationSimilarity, explanation_similarity, top1_agreement


def test_top1_agreement_and_per_group_agreement():
    student = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    teacher = torch.tensor([0, 1, 1, 0])                  # classes: agree, agree, differ, differ
    assert top1_agreement(student, teacher).tolist() == [True, True, False, False]
    metric = Agreement(2, group_names=["in", "ood"])
    metric.update(student[:3], teacher[:3], torch.tensor([0, 0, 1]))
    metric.update(student[3:], teacher[3:], torch.tensor([1]))
    out = metric.compute()
    assert out["agreement"].item() == 0.5
    assert out["agreement/in"].item() == 1.0 and out["agreement/ood"].item() == 0.0
    assert out["worst_group_agreement"].item() == 0.0 and out["worst_group"].item() == 1
    with pytest.raises(ValueError, match="same N samples"):
        top1_agreement(student, teacher[:3])


def test_explanation_similarity_hand_computed_and_finite_for_zero_maps():
    teacher = torch.tensor([[[1.0, 0.0]], [[0.0, 0.0]], [[1.0, 2.0]]])
    student = torch.tensor([[[1.0, 1.0]], [[3.0, 1.0]], [[-2.0, -4.0]]])
    sim = explanation_similarity(teacher, student)
    assert sim.tolist() == pytest.approx([1 / math.sqrt(2), 0.0, -1.0])
    assert explanation_similarity(torch.zeros(2, 6, 4, 4), torch.zeros(2, 6, 4, 4)).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="share a shape"):
        explanation_similarity(torch.zeros(2, 3, 4), torch.zeros(2, 4, 3))


def test_explanation_similarity_accumulation_equals_one_shot():
    teacher, student = torch.randn(9, 6, 5, 5), torch.randn(9, 6, 5, 5)
    student[2] = 0.0
    metric = ExplanationSimilarity()
    for t, s in zip(teacher.split(4), student.split(4)):
        metric.update(t, s)
    torch.testing.assert_close(metric.compute(), explanation_similarity(teacher, student).mean())
