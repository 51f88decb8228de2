"""Pareto front over (F1, EPG, IoU), the representative pick and the incremental, resumable tracker."""

import itertools
import json
import math

import pytest
import torch

from rightreasons.metrics import ParetoTracker, dominates, pareto_front, representative

POINTS = [
    {"id": "A", "f1": 0.80, "epg": 0.50, "iou": 0.30},
    {"id": "B", "f1": 0.78, "epg": 0.60, "iou": 0.25},
    {"id": "C", "f1": 0.70, "epg": 0.72, "iou": 0.20},
    {"id": "D", "f1": 0.79, "epg": 0.45, "iou": 0.28},   # dominated by A
    {"id": "E", "f1": 0.74, "epg": 0.70, "iou": 0.35},
    {"id": "F", "f1": 0.70, "epg": 0.72, "iou": 0.20},   # equal to C: equal points do not dominate each other
    {"id": "G", "f1": 0.60, "epg": 0.60, "iou": 0.10},   # dominated by B, C, E
]
FRONT = ["A", "B", "C", "E", "F"]


def ids(points):
    return [p["id"] for p in points]


def test_dominates():
    a, b, d = POINTS[0], POINTS[1], POINTS[3]
    assert dominates(a, d) and not dominates(d, a)
    assert not dominates(a, b) and not dominates(b, a)
    assert not dominates(a, a)


def test_pareto_front_on_a_hand_made_set():
    assert ids(pareto_front(POINTS)) == FRONT
    assert ids(pareto_front(POINTS, objectives=("f1", "epg"))) == ["A", "B", "C", "E", "F"]
    assert ids(pareto_front(POINTS, objectives=("f1",))) == ["A"]


def test_representative_is_the_highest_epg_within_the_f1_budget():
    assert representative(POINTS)["id"] == "B"                      # F1 >= 0.75: A, B, D -> best EPG is B
    assert representative(POINTS, max_f1_drop=0.07)["id"] == "E"    # F1 >= 0.73 adds E
    assert representative(POINTS, max_f1_drop=0.2)["id"] == "C"     # C ties F on everything: the first one
    percent = [dict(p, f1=100 * p["f1"], epg=100 * p["epg"]) for p in POINTS]
    assert representative(percent, max_f1_drop=5.0)["id"] == "B"


def test_representative_breaks_epg_ties_towards_the_front():
    points = [{"id": "low", "f1": 0.70, "epg": 0.6, "iou": 0.2}, {"id": "high", "f1": 0.72, "epg": 0.6, "iou": 0.2}]
    assert representative(points)["id"] == "high"


def test_bad_evaluations_are_refused():
    with pytest.raises(ValueError, match="evaluation 'x' has no objective 'iou'"):
        pareto_front([{"id": "x", "f1": 0.5, "epg": 0.5}])
    with pytest.raises(ValueError, match="objective 'epg' must be finite"):
        pareto_front([{"id": "x", "f1": 0.5, "epg": math.nan, "iou": 0.1}])
    with pytest.raises(ValueError, match="has no 'id' key"):
        pareto_front([{"f1": 0.5, "epg": 0.5, "iou": 0.1}])
    with pytest.raises(ValueError, match="duplicate evaluation id 'A'"):
        pareto_front([POINTS[0], POINTS[0]])
    with pytest.raises(ValueError, match="no evaluations"):
        representative([])


def test_tracker_matches_the_batch_front_in_any_order():
    for order in itertools.islice(itertools.permutations(POINTS), 0, 5040, 97):
        tracker = ParetoTracker()
        for p in order:
            on_front = tracker.update(p)
            assert on_front == (p["id"] in ids(pareto_front(order[:order.index(p) + 1])))
        assert sorted(tracker.front_ids) == FRONT
        assert tracker.representative()["id"] == "B"


def test_tracker_reports_new_points_and_drops_dominated_ones():
    tracker = ParetoTracker()
    assert tracker.update(POINTS[3])                       # D alone is on the front
    assert tracker.update(POINTS[0]) and tracker.front_ids == ["A"]   # A dominates D
    assert tracker.update(POINTS[6]) and tracker.front_ids == ["A", "G"]   # G has the higher EPG
    assert tracker.update(POINTS[1]) and tracker.front_ids == ["A", "B"]   # B dominates G
    assert not tracker.update(dict(POINTS[3], id="D2"))                     # dominated by A
    assert tracker.front_ids == ["A", "B"]


def test_tracker_accepts_tensor_values_and_rejects_repeated_ids():
    tracker = ParetoTracker()
    assert tracker.update({"id": 1, "f1": torch.tensor(0.5), "epg": torch.tensor(0.4), "iou": 0.1, "epoch": 3})
    assert tracker.front == [{"id": 1, "f1": 0.5, "epg": pytest.approx(0.4), "iou": 0.1, "epoch": 3}]
    with pytest.raises(ValueError, match="id 1 was already added"):
        tracker.update({"id": 1, "f1": 0.9, "epg": 0.9, "iou": 0.9})


def test_tracker_state_round_trips_through_json():
    tracker = ParetoTracker()
    for p in POINTS[:4]:
        tracker.update(p)
    state = json.loads(json.dumps(tracker.state_dict()))
    restored = ParetoTracker.from_state_dict(state)
    assert restored.front == tracker.front
    with pytest.raises(ValueError, match="already added"):
        restored.update(POINTS[3])                          # a dominated id seen before the save
    for p in POINTS[4:]:
        assert restored.update(p) == tracker.update(p)
    assert restored.front == tracker.front
    with pytest.raises(ValueError, match="tracks objectives"):
        ParetoTracker(objectives=("f1", "epg")).load_state_dict(state)
    with pytest.raises(ValueError, match="lacks keys"):
        ParetoTracker().load_state_dict({"front": []})
