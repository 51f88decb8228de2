"""Multi-label F1/mAP, group and worst-group accuracy: hand-computed values, the logit threshold convention,
batch accumulation."""

import pytest
import torch

from rightreasons.metrics import GroupAccuracy, MultiLabelClassification, group_accuracy

LOGITS = torch.tensor([[2.0, -1.0, 0.5], [-3.0, 1.0, -0.2]])
LABELS = torch.tensor([[1, 0, 0], [0, 1, 1]])


def test_multilabel_hand_computed():
    # Predicted (logit > 0): [[1,0,1],[0,1,0]] -> TP 2, FP 1 (sample 0, class 2), FN 1 (sample 1, class 2).
    out = MultiLabelClassification(3)(LOGITS, LABELS)
    assert out["f1"].item() == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert out["f1_per_class"].tolist() == pytest.approx([1.0, 1.0, 0.0])
    # AP: classes 0 and 1 rank their positive first (1.0); class 2 ranks the negative above the positive (0.5).
    assert out["map"].item() == pytest.approx((1 + 1 + 0.5) / 3)


def test_the_mean_ap_leaves_out_classes_without_positives_silently(recwarn):
    """Issue 25: torchmetrics counted a class absent from the data as AP 0 and warned at every validation."""
    labels = torch.tensor([[1, 0, 0], [0, 1, 0]])  # class 2 has no positive
    out = MultiLabelClassification(3)(LOGITS, labels)
    assert out["map"].item() == pytest.approx((1 + 1) / 2)
    assert not [w for w in recwarn if "No positive samples" in str(w.message)]
    assert torch.isnan(MultiLabelClassification(3)(LOGITS, torch.zeros(2, 3, dtype=torch.long))["map"])


def test_positive_logits_below_one_count_as_positive_predictions():
    # torchmetrics would read values in [0, 1] as probabilities; we always pass sigmoid(logits).
    metric = MultiLabelClassification(2)
    metric.update(torch.tensor([[0.3, -0.3], [-0.3, 0.3]]), torch.tensor([[1, 0], [0, 1]]))
    assert metric.compute()["f1"].item() == pytest.approx(1.0)


def test_multilabel_accumulation_equals_one_shot():
    logits, labels = torch.randn(13, 4), (torch.rand(13, 4) > 0.5).long()
    labels[0] = 1   # every class has a positive
    one_shot = MultiLabelClassification(4)
    one_shot.update(logits, labels)
    batched = MultiLabelClassification(4)
    for lo, la in zip(logits.split(5), labels.split(5)):
        batched.update(lo, la.float())
    for key, value in one_shot.compute().items():
        torch.testing.assert_close(batched.compute()[key], value)


def test_multilabel_refuses_bad_shapes():
    with pytest.raises(ValueError, match=r"logits must be float \[N, 3\]"):
        MultiLabelClassification(3).update(torch.randn(2, 4), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="labels must be multi-hot of shape"):
        MultiLabelClassification(3).update(torch.randn(2, 3), torch.zeros(2, 2))


def test_group_accuracy_hand_computed():
    preds = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.7, 0.3], [0.4, 0.6], [0.6, 0.4], [0.1, 0.9]])
    target = torch.tensor([0, 1, 1, 1, 0, 0])   # correct: T T F T T F
    groups = torch.tensor([0, 0, 2, 2, 3, 3])   # group 1 has no sample
    out = group_accuracy(preds, target, groups, num_groups=4, group_names=["G1", "G2", "G3", "G4"])
    assert out["accuracy"].item() == pytest.approx(4 / 6)
    assert out["accuracy/G1"].item() == 1.0
    assert out["accuracy/G3"].item() == 0.5 and out["accuracy/G4"].item() == 0.5
    assert "accuracy/G2" not in out
    assert out["worst_group_accuracy"].item() == 0.5 and out["worst_group"].item() == 2
    # integer class predictions give the same result
    same = group_accuracy(preds.argmax(1), target, groups, num_groups=4, group_names=["G1", "G2", "G3", "G4"])
    assert all(torch.equal(same[k], out[k]) for k in out)


def test_group_accuracy_accumulation_and_default_single_group():
    preds, target, groups = torch.randn(20, 3), torch.randint(0, 3, (20,)), torch.randint(0, 4, (20,))
    batched = GroupAccuracy(4)
    for p, t, g in zip(preds.split(6), target.split(6), groups.split(6)):
        batched.update(p, t, g)
    one_shot = group_accuracy(preds, target, groups, num_groups=4)
    assert batched.compute().keys() == one_shot.keys()
    assert all(torch.equal(batched.compute()[k], one_shot[k]) for k in one_shot)
    plain = GroupAccuracy()
    plain.update(preds, target)
    assert plain.compute()["accuracy"].item() == pytest.approx((preds.argmax(1) == target).double().mean().item())


def test_group_accuracy_refuses_bad_groups_and_targets():
    metric = GroupAccuracy(2)
    with pytest.raises(ValueError, match=r"group ids must lie in \[0, 1\]"):
        metric.update(torch.randn(3, 2), torch.tensor([0, 1, 0]), torch.tensor([0, 2, 1]))
    with pytest.raises(ValueError, match="target must be integer classes"):
        metric.update(torch.randn(3, 2), torch.tensor([0.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match="float scores"):
        metric.update(torch.randn(3, 2, 2), torch.tensor([0, 1, 0]))
