"""EPG, IoU, on-object ratio and the every-ground-truth-class evaluation: hand-computed values, edge cases,
batch accumulation."""

import importlib
import math

import pytest
import torch

from rightreasons.boxes import boxes_to_masks
from rightreasons.explain import Attribution
from rightreasons.metrics import (EnergyPointingGame, IoU, OnObjectRatio, attribution_fn, epg, evaluate_localization,
                                  iou, localization_pairs, normalize_attributions, on_object_ratio, run_attribution,
                                  select_iou_threshold)


def t(rows):
    """A single [1, H, W] map from nested lists."""
    return torch.tensor([rows], dtype=torch.float32)


def test_epg_hand_computed():
    # A⁺ = [2, 0, 1, 1] (sum 4); inside the mask: 2 + 1 = 3.
    assert epg(t([[2, -1], [1, 1]]), t([[1, 0], [0, 1]])).item() == pytest.approx(0.75)
    assert epg(t([[2, -1], [1, 1]]), t([[1, 0], [0, 1]]).bool()).item() == pytest.approx(0.75)


@pytest.mark.parametrize("attr, mask, expected", [
    ([[0, 0], [0, 0]], [[1, 0], [0, 0]], 0.0),      # all-zero attribution
    ([[-1, -2], [-3, 0]], [[1, 0], [0, 0]], 0.0),   # all-negative attribution
    ([[1, 2], [3, 4]], [[0, 0], [0, 0]], 0.0),      # empty mask
    ([[1, -2], [3, 4]], [[1, 1], [1, 1]], 1.0),     # mask covering the whole image
])
def test_epg_edge_cases_are_finite(attr, mask, expected):
    value = epg(t(attr), t(mask))
    assert torch.isfinite(value).all() and value.item() == pytest.approx(expected)


def test_epg_keeps_the_graph_and_has_finite_gradients_at_zero_energy():
    a = torch.tensor([[[1.0, 2.0], [0.0, 1.0]], [[0.0, 0.0], [0.0, 0.0]]], requires_grad=True)
    m = torch.tensor([[[1, 0], [0, 0]], [[1, 0], [0, 0]]])
    epg(a, m).sum().backward()
    assert torch.isfinite(a.grad).all()
    # d/dA00 of A00 / (A00 + 3) at A00 = 1 is 3 / 16; the zero map has zero gradient.
    assert a.grad[0, 0, 0].item() == pytest.approx(3 / 16)
    assert a.grad[1].abs().sum() == 0


def test_bad_inputs_are_refused_with_clear_errors():
    with pytest.raises(ValueError, match="epg: masks must be binary"):
        epg(t([[1, 2]]), t([[0.5, 1]]))
    with pytest.raises(ValueError, match="same shape"):
        epg(torch.zeros(2, 4, 4), torch.zeros(2, 4, 5))
    with pytest.raises(ValueError, match=r"\[N, H, W\]"):
        iou(torch.zeros(4, 4), torch.zeros(4, 4), 0.5)
    with pytest.raises(ValueError, match="normalize"):
        iou(torch.zeros(1, 4, 4), torch.zeros(1, 4, 4), 0.5, normalize="sum")


def test_normalizations_hand_computed():
    mixed = t([[4, -2], [2, 1]])          # A⁺ = [4, 0, 2, 1]
    positive = t([[4, 2], [3, 2]])
    assert normalize_attributions(mixed, "max").flatten().tolist() == [1, 0, 0.5, 0.25]
    assert normalize_attributions(mixed, "minmax").flatten().tolist() == [1, 0, 0.5, 0.25]
    assert normalize_attributions(positive, "max").flatten().tolist() == [1, 0.5, 0.75, 0.5]
    assert normalize_attributions(positive, "minmax").flatten().tolist() == [1, 0, 0.5, 0]
    for scheme in ("max", "minmax"):
        assert normalize_attributions(t([[3, 3], [3, 3]]), scheme).flatten().tolist() == [1, 1, 1, 1]
        assert normalize_attributions(t([[0, -1], [-2, 0]]), scheme).flatten().tolist() == [0, 0, 0, 0]


def test_iou_hand_computed():
    positive = t([[4, 2], [3, 2]])
    mask = t([[1, 1], [0, 0]])
    # minmax: [1, 0, .5, 0] > .4 -> [1, 0, 1, 0]; with mask [1, 1, 0, 0]: 1 / 3.
    assert iou(positive, mask, 0.4, "minmax").item() == pytest.approx(1 / 3)
    # max: [1, .5, .75, .5] > .7 -> [1, 0, 1, 0] -> 1/3; > .8 -> [1, 0, 0, 0] -> 1/2; > .4 -> all -> 2/4.
    assert iou(positive, mask, 0.7, "max").item() == pytest.approx(1 / 3)
    assert iou(positive, mask, 0.8, "max").item() == pytest.approx(1 / 2)
    assert iou(positive, mask, 0.4, "max").item() == pytest.approx(1 / 2)
    many = iou(positive, mask, [0.4, 0.7, 0.8], "max")
    assert many.shape == (1, 3) and many[0].tolist() == pytest.approx([1 / 2, 1 / 3, 1 / 2])


def test_iou_edge_cases_are_finite():
    zero, empty, full = torch.zeros(1, 3, 3), torch.zeros(1, 3, 3), torch.ones(1, 3, 3)
    assert iou(zero, empty, 0.5).item() == 0.0     # empty union
    assert iou(zero, full, 0.5).item() == 0.0      # nothing above threshold
    assert iou(full, full, 0.5).item() == 1.0      # constant positive map = everything important
    assert iou(-full, full, 0.0).item() == 0.0     # all-negative map


def test_select_iou_threshold_picks_the_best_candidate():
    # Object pixels normalise to 1 or 0.6, background to 0.3: thresholds in [0.3, 0.6) give IoU 1.
    maps = torch.full((3, 4, 4), 3.0)
    masks = torch.zeros(3, 4, 4, dtype=torch.bool)
    masks[:, :2, :2] = True
    maps[masks] = 6.0
    maps[:, 0, 0] = 10.0
    best, means = select_iou_threshold(maps, masks, [0.1, 0.2, 0.4, 0.7], normalize="max")
    assert best == pytest.approx(0.4)
    assert means.tolist() == pytest.approx([4 / 16, 4 / 16, 1.0, 1 / 4])


def test_on_object_ratio_hand_computed():
    attr = t([[4, 1, 9], [2, -3, 5]])
    box = t([[1, 1, 0], [1, 1, 0]])        # in-box A⁺ = 4 + 1 + 2 + 0 = 7
    obj = t([[1, 0, 1], [0, 1, 0]])        # on the object and in the box: 4 (+ 0 for the negative pixel)
    assert on_object_ratio(attr, obj, box).item() == pytest.approx(4 / 7)
    assert on_object_ratio(attr, obj, torch.zeros_like(box)).item() == 0.0    # empty box
    assert on_object_ratio(torch.zeros_like(attr), obj, box).item() == 0.0    # zero map


def _batches(n, sizes):
    """Random maps + masks split into uneven batches."""
    data = [torch.randn(n, 6, 5), torch.rand(n, 6, 5) > 0.6, torch.rand(n, 6, 5) > 0.3]
    data[1][0] = False                        # one empty mask
    data[0][1] = 0.0                          # one all-zero map
    cuts = torch.tensor(sizes).cumsum(0).tolist()[:-1]
    return data, list(zip(*(d.tensor_split(cuts) for d in data)))


def test_metrics_accumulated_over_batches_equal_the_one_shot_values():
    (a, m, o), batches = _batches(11, [3, 1, 7])
    metrics = [EnergyPointingGame(), IoU(0.5), IoU([0.1, 0.5, 0.9], normalize="max"), OnObjectRatio()]
    for ab, mb, ob in batches:
        metrics[0].update(ab, mb)
        metrics[1].update(ab, mb)
        metrics[2].update(ab, mb)
        metrics[3].update(ab, ob & mb, mb)
    torch.testing.assert_close(metrics[0].compute(), epg(a, m).mean())
    torch.testing.assert_close(metrics[1].compute(), iou(a, m, 0.5).mean())
    torch.testing.assert_close(metrics[2].compute(), iou(a, m, [0.1, 0.5, 0.9], "max").mean(0))
    torch.testing.assert_close(metrics[3].compute(), on_object_ratio(a, o & m, m).mean())
    assert all(torch.isfinite(x.compute()).all() for x in metrics)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_compute_without_data_is_an_error():
    with pytest.raises(ValueError, match="EnergyPointingGame.compute"):
        EnergyPointingGame().compute()


def _evaluation_mask(boxes) -> torch.Tensor:
    """The union of ``boxes`` (all of class 0) on a 4×5 image, as the localisation evaluation rasterises it."""
    boxes = torch.as_tensor(boxes, dtype=torch.float32).reshape(-1, 4)
    return boxes_to_masks(boxes, torch.zeros(len(boxes), dtype=torch.long), 0, canvas=(4, 5))


def test_evaluation_masks_follow_the_pixel_centre_rule():
    """Evaluation masks are rasterised like the training masks: a box covers pixel (i, j) iff
    ``x1 <= j + 0.5 < x2`` and ``y1 <= i + 0.5 < y2``."""
    expected = torch.zeros(4, 5, dtype=torch.bool)
    expected[0:2, 1:3] = True
    assert torch.equal(_evaluation_mask([[1, 0, 3, 2]]), expected)
    # fractional boxes cover the pixels whose centres they contain; boxes are clipped to the image; union of two boxes
    mask = _evaluation_mask([[0.5, 0.5, 1.2, 1.0], [3.5, 3.0, 9.0, 9.0]])
    expected = torch.zeros(4, 5, dtype=torch.bool)
    expected[0, 0] = True          # centre (0.5, 0.5) only; pixel (0, 1) overlaps the box but its centre 1.5 is outside
    expected[3:4, 3:5] = True
    assert torch.equal(mask, expected)
    thin = _evaluation_mask([[0.6, 0.0, 1.4, 4.0]])  # overlaps two columns, holds neither centre: its centre's pixel
    assert thin.sum() == 1 and thin[2, 1]
    assert not _evaluation_mask(torch.zeros(0, 4)).any()
    with pytest.raises(ValueError, match="x2 >= x1"):
        _evaluation_mask([[3.0, 0.0, 1.0, 2.0]])


def test_localization_pairs_rasterise_boxes_with_the_pixel_centre_rule():
    images, labels = torch.zeros(1, 3, 4, 5), torch.tensor([[1, 0]])
    boxes, box_labels = [torch.tensor([[0.5, 0.5, 1.2, 1.0], [3.5, 3.0, 9.0, 9.0]])], [torch.tensor([0, 0])]
    (pairs,) = localization_pairs(torch.nn.Identity(), images, labels, boxes, box_labels, _class_stripe_attribution)
    assert torch.equal(pairs.masks[0], _evaluation_mask(boxes[0]))
    assert pairs.masks[0].sum() == 3


def _class_stripe_attribution(model, x, target):
    """Attribution of class k = 1 on column k (and -1 on the last column): a known, class-dependent map."""
    maps = torch.zeros(x.shape[0], *x.shape[-2:])
    maps[torch.arange(x.shape[0]), :, target] = 1.0
    maps[:, :, -1] = -1.0
    return maps


def test_every_ground_truth_class_of_every_image_is_evaluated():
    images = torch.zeros(2, 3, 4, 6)
    labels = torch.tensor([[1, 0, 1], [0, 1, 1]])
    boxes = [torch.tensor([[0, 0, 1, 4], [2, 0, 4, 2]]), torch.tensor([[0, 0, 6, 4]])]
    box_labels = [torch.tensor([0, 2]), torch.tensor([1])]   # class 2 of image 1 has no box: skipped
    seg = torch.full((2, 4, 6), 255)
    seg[0, 0, 0] = 0
    seg[1, :, 1] = 1
    for batch_size in (1, 2, 8):
        batches = list(localization_pairs(torch.nn.Identity(), images, labels, boxes, box_labels,
                                          _class_stripe_attribution, batch_size, segmentations=seg))
        classes = torch.cat([b.classes for b in batches])
        index = torch.cat([b.image_index for b in batches])
        assert classes.tolist() == [0, 2, 1] and index.tolist() == [0, 0, 1]
        masks = torch.cat([b.masks for b in batches])
        assert masks[0].sum() == 4 and masks[0][:, 0].all()             # box [0,0,1,4] of class 0
        assert masks[1].sum() == 4 and masks[1][:2, 2:4].all()          # box [2,0,4,2] of class 2
        assert masks[2].all()
        objects = torch.cat([b.object_masks for b in batches])
        assert objects[0].sum() == 1 and objects[1].sum() == 0 and objects[2][:, 1].all()
    # EPG by hand: class 0 column 0 fully in its box -> 1; class 2 column 2: rows 0-1 of 4 in the box -> 0.5;
    # class 1: column 1 inside the full-image box -> 1.
    metric = EnergyPointingGame()
    count = evaluate_localization(torch.nn.Identity(), images, labels, boxes, box_labels,
                                  _class_stripe_attribution, [metric], batch_size=2)
    assert count == 3
    assert metric.compute().item() == pytest.approx((1 + 0.5 + 1) / 3)


def test_localization_pairs_refuses_mismatched_annotations():
    with pytest.raises(ValueError, match="image 0 has 2 boxes but 1 box labels"):
        list(localization_pairs(torch.nn.Identity(), torch.zeros(1, 3, 4, 4), torch.ones(1, 2),
                                [torch.zeros(2, 4)], [torch.zeros(1)], _class_stripe_attribution))


def test_run_attribution_checks_the_resolution_and_enables_gradients():
    model = torch.nn.Conv2d(3, 2, 3, padding=1)
    x = torch.randn(2, 3, 8, 8)

    def input_x_gradient(model, x, target):
        x = x.clone().requires_grad_(True)
        out = model(x).mean((2, 3)).gather(1, target[:, None]).sum()
        (grad,) = torch.autograd.grad(out, x)
        return (grad * x).sum(1)

    with torch.no_grad():
        maps = run_attribution(input_x_gradient, model, x, torch.tensor([0, 1]))
    assert maps.shape == (2, 8, 8) and not maps.requires_grad
    with pytest.raises(ValueError, match=r"must return maps \[N, H, W\] = \[2, 8, 8\]"):
        run_attribution(lambda m, x, t: torch.zeros(2, 4, 4), model, x, torch.tensor([0, 1]))


def test_attribution_fn_forwards_to_explain_attribute(monkeypatch):
    calls = []

    def fake_attribute(model, x, target, method, layer="input", **options):
        calls.append((method, layer, options))
        maps = torch.zeros(x.shape[0], *x.shape[-2:])
        return Attribution(method=method, logits=torch.zeros(x.shape[0], 2), target=target, maps=maps, raw=maps,
                           weights=None)

    # the module, not the function of the same name that rightreasons.metrics exports
    monkeypatch.setattr(importlib.import_module("rightreasons.metrics.attribution_fn"), "attribute", fake_attribute)
    fn = attribution_fn("intgrad", "mid2", steps=7)
    maps = fn(torch.nn.Identity(), torch.zeros(2, 3, 4, 4), torch.tensor([1, 0]))
    assert maps.shape == (2, 4, 4)
    assert calls == [("intgrad", "mid2", {"steps": 7})]
    assert math.isfinite(epg(maps, torch.ones(2, 4, 4)).sum().item())
