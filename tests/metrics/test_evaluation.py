"""What the classification evaluator reports and how results read on the console (issue 14: the worst group by its
name, which metric ``score`` is, one line with every metric)."""

import torch

from rightreasons.metrics.evaluation import ClassificationEvaluator, format_results

GROUPS = ("G1 landbird/land", "G2 landbird/water", "G3 waterbird/land", "G4 waterbird/water")


def _score(evaluator, logits, labels, groups=None):
    batch = {"labels": labels, **({"group": groups} if groups is not None else {})}
    evaluator.update(None, batch, logits)
    return evaluator.compute()


def test_the_worst_group_is_named_and_the_score_says_which_metric_it_is():
    # eight images, two per group; right: G1 2/2, G2 1/2, G3 0/2, G4 2/2
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    classes = groups // 2
    predicted = torch.tensor([0, 0, 0, 1, 0, 0, 1, 1])
    results = _score(ClassificationEvaluator(2, False, GROUPS), torch.eye(2)[predicted],
                     torch.eye(2)[classes], groups)
    assert results["worst_group"] == "G3 waterbird/land" and results["worst_group_accuracy"] == 0.0
    assert results["accuracy/G2 landbird/water"] == 0.5
    assert results["score_metric"] == "accuracy" and results["score"] == results["accuracy"] == 5 / 8
    # without groups there is no worst group to name; multi-label data is scored by F1
    plain = _score(ClassificationEvaluator(2, False), torch.eye(2)[predicted], torch.eye(2)[classes])
    assert "worst_group" not in plain and plain["score_metric"] == "accuracy"
    labels = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    multi = _score(ClassificationEvaluator(3, True), 10 * labels - 5, labels)
    assert multi["score_metric"] == "f1" and multi["score"] == multi["f1"] == 1.0 and "worst_group" not in multi
    assert multi["f1_per_class"] == [1.0, 1.0, 1.0]
    named = _score(ClassificationEvaluator(3, True, class_names=["cat", "dog", "car"]), 10 * labels - 5, labels)
    assert named["f1_per_class"] == {"cat": 1.0, "dog": 1.0, "car": 1.0}  # issue 25: per-class F1 by class name
    assert "worst_group_accuracy" not in plain  # issue 25: no worst group of one group


def test_results_read_as_one_line_with_every_metric_by_name():
    results = {"accuracy": 0.625, "worst_group_accuracy": 0.0, "accuracy/G3 waterbird/land": 0.0,
               "worst_group": "G3 waterbird/land", "f1_per_class": [0.5, 1.0, 0.25], "images": 8,
               "score_metric": "accuracy", "score": 0.625}
    assert format_results(results) == (
        "score=0.6250 (accuracy), accuracy=0.6250, worst_group_accuracy=0.0000, accuracy/G3 waterbird/land=0.0000, "
        "worst_group=G3 waterbird/land, f1_per_class=[3 values], images=8")
