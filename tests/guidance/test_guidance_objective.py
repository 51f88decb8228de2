"""The guidance objective: seeded class sampling, box masks (union, dilation), skipping images without boxes, and one
forward pass serving classification and localisation."""

import copy

import pytest
import torch

from rightreasons.errors import UsageError
from rightreasons.guidance import GuidanceObjective, energy_loss, get_loss, sample_classes


def test_sampling_is_seeded_and_draws_uniformly_among_positive_labels():
    labels = torch.tensor([[1, 0, 1, 1, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 0]], dtype=torch.float32).repeat(1000, 1)
    first = sample_classes(labels, torch.Generator().manual_seed(3))
    assert torch.equal(first, sample_classes(labels, torch.Generator().manual_seed(3)))
    one, two, none = first[0::3], first[1::3], first[2::3]
    assert set(one.tolist()) == {0, 2, 3} and set(two.tolist()) == {3}
    counts = torch.bincount(one, minlength=5)[[0, 2, 3]]
    assert ((counts - 1000 / 3).abs() < 75).all(), counts  # 5 standard deviations
    assert set(none.tolist()) == set(range(5))  # no positive label: uniform over all classes


def test_mask_is_the_union_of_the_sampled_class_boxes_and_empty_without_boxes():
    boxes = [torch.tensor([[1.0, 1.0, 5.0, 4.0], [3.0, 2.0, 8.0, 6.0], [0.0, 0.0, 2.0, 2.0]]),
             torch.tensor([[0.4, 0.0, 2.6, 1.0]])]
    box_labels = [torch.tensor([2, 2, 0]), torch.tensor([1])]
    masks = GuidanceObjective().masks(boxes, box_labels, torch.tensor([2, 1]), torch.tensor([True, True]), (8, 10))
    expected = torch.zeros(2, 8, 10, dtype=torch.bool)
    expected[0, 1:4, 1:5] = True
    expected[0, 2:6, 3:8] = True
    expected[1, 0:1, 0:3] = True  # pixel centres 0.5, 1.5, 2.5 lie in [0.4, 2.6)
    assert torch.equal(masks, expected)
    skipped = GuidanceObjective().masks(boxes, box_labels, torch.tensor([2, 1]), torch.tensor([False, True]), (8, 10))
    assert not skipped[0].any() and torch.equal(skipped[1], expected[1])


def test_dilation_grows_each_side_by_a_fraction_of_the_box_and_clips_to_the_image():
    boxes = [torch.tensor([[4.0, 4.0, 8.0, 12.0], [0.0, 1.0, 4.0, 3.0]])]
    masks = GuidanceObjective(dilation=0.25).masks(boxes, [torch.tensor([0, 0])], torch.tensor([0]),
                                                   torch.tensor([True]), (14, 10))
    expected = torch.zeros(1, 14, 10, dtype=torch.bool)
    expected[0, 2:14, 3:9] = True  # [3, 2, 9, 14]
    expected[0, 0:3, 0:5] = True   # [-1, 0.5, 5, 3.5] clipped to [0, 0.5, 5, 3.5]
    assert torch.equal(masks, expected)


@pytest.fixture
def batch(bcos_input):
    """``batch(n=4)``: B-cos images, labels (class 0 everywhere, class 3 on even samples), two boxes per image."""
    def make(n: int = 4):
        images = bcos_input(n)
        labels = torch.zeros(n, 5)
        labels[:, 0] = 1
        labels[::2, 3] = 1
        boxes = [torch.tensor([[2.0, 2.0, 9.0, 10.0], [6.0, 5.0, 14.0, 15.0]]) for _ in range(n)]
        box_labels = [torch.tensor([0, 3]) for _ in range(n)]
        return images, labels, boxes, box_labels
    return make


def test_images_without_boxes_are_skipped_and_one_forward_serves_both_losses(tiny_bcos_resnet, batch):
    model = tiny_bcos_resnet().train()
    reference = copy.deepcopy(model)
    images, labels, boxes, box_labels = batch()
    has_boxes = torch.tensor([True, False, True, False])
    objective = GuidanceObjective(method="bcos", layer="mid2", loss="l1", dilation=0.1)
    out = objective(model, images, labels, boxes, box_labels, has_boxes, torch.Generator().manual_seed(0))
    assert torch.equal(out.logits, reference(images))  # the ordinary forward (and BatchNorm update) of the step
    assert torch.equal(out.annotated, has_boxes) and not out.masks[~has_boxes].any()
    per_sample = get_loss("l1")(out.attributions, out.masks, reduction="none")
    torch.testing.assert_close(out.loss, per_sample[has_boxes].mean())
    chosen = objective.masks(boxes, box_labels, out.classes, torch.ones(4, dtype=torch.bool), (16, 16))
    assert torch.equal(out.masks[has_boxes], chosen[has_boxes]) and chosen[~has_boxes].any()
    total = torch.nn.functional.binary_cross_entropy_with_logits(out.logits, labels) + 0.1 * out.loss
    total.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.conv1.linear.weight.grad.abs().sum() > 0


def test_seeded_objective_is_reproducible(tiny_bcos_resnet, batch):
    model = tiny_bcos_resnet().eval()
    images, labels, boxes, box_labels = batch()
    has_boxes = torch.ones(4, dtype=torch.bool)
    objective = GuidanceObjective(method="ixg", layer="input", loss="energy")
    runs = [objective(model, images, labels, boxes, box_labels, has_boxes, torch.Generator().manual_seed(7))
            for _ in range(2)]
    assert torch.equal(runs[0].classes, runs[1].classes) and torch.equal(runs[0].loss, runs[1].loss)
    assert torch.equal(runs[0].loss, energy_loss(runs[0].attributions, runs[0].masks))
    assert ((labels.gather(1, runs[0].classes[:, None])) == 1).all()


def test_a_batch_without_boxes_costs_one_plain_forward(tiny_bcos_resnet, batch):
    model = tiny_bcos_resnet().eval()
    images, labels, boxes, box_labels = batch()
    out = GuidanceObjective()(model, images, labels, boxes, box_labels, torch.zeros(4, dtype=torch.bool))
    assert out.attributions is None and out.loss == 0 and not out.annotated.any()
    assert torch.equal(out.logits, model(images))


def test_objective_rejects_bad_configuration_and_inconsistent_batches(tiny_bcos_resnet, batch):
    with pytest.raises(ValueError, match="valid names"):
        GuidanceObjective(loss="dice")
    with pytest.raises(UsageError, match=r"method 'saliency' is not one of \['bcos', 'ixg', 'gradcam', 'intgrad'\]"):
        GuidanceObjective(method="saliency")
    with pytest.raises(UsageError, match="needs an attribution map"):  # W(x) is no map
        GuidanceObjective(method="bcos_weights")
    images, labels, boxes, box_labels = batch(2)
    labels[1] = 0
    with pytest.raises(ValueError, match=r"images \[1\] of the batch have boxes but no positive label"):
        GuidanceObjective()(tiny_bcos_resnet(), images, labels, boxes, box_labels, torch.ones(2, dtype=torch.bool))
