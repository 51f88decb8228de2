"""One box geometry for training and evaluation: the pixel rule, and the masks and Energy/EPG the guidance loss and the
localisation metrics compute from the same boxes and maps."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchvision import tv_tensors

from rightreasons.boxes import (boxes_to_masks, canvas_size, class_masks, clip_boxes, complement_boxes, dilate_boxes,
                                outline)
from rightreasons.guidance import GuidanceObjective, energy_loss
from rightreasons.metrics import ENERGY_EPS, EnergyPointingGame, epg, localization_pairs


def _random_boxes(generator: torch.Generator, count: int, size: int) -> torch.Tensor:
    """Boxes with fractional corners, some on or beyond the border, some thinner than a pixel."""
    corners = torch.rand(count, 2, 2, generator=generator) * (size + 2) - 1
    corners = torch.cat([corners.amin(1), corners.amax(1)], dim=1)  # x1, y1 <= x2, y2
    corners[::5, 2:] = corners[::5, :2] + torch.rand(len(corners[::5]), 2, generator=generator) * 0.9
    corners[1::7] = torch.tensor([0.0, 0.0, float(size), float(size)])
    return clip_boxes(corners, (size, size))


def test_integer_boxes_cover_exactly_their_slice():
    mask = boxes_to_masks(torch.tensor([[2.0, 1.0, 5.0, 3.0]]), torch.tensor([0]), 0, canvas=(6, 8))
    expected = torch.zeros(6, 8, dtype=torch.bool)
    expected[1:3, 2:5] = True
    assert torch.equal(mask, expected)


def test_a_fractional_box_covers_the_pixels_whose_centres_it_holds():
    mask = boxes_to_masks(torch.tensor([[0.5, 0.5, 1.2, 1.0]]), torch.tensor([3]), 3, canvas=(4, 4))
    assert mask.sum() == 1 and mask[0, 0]  # the overlap rule would also have taken pixel (0, 1)
    thin = torch.tensor([[0.6, 0.0, 1.4, 4.0], [2.0, 0.0, 4.0, 4.0]])  # the first holds no column's centre
    assert torch.equal(boxes_to_masks(thin, torch.tensor([0, 0]), 0, canvas=(4, 4)),
                       boxes_to_masks(thin[1:], torch.tensor([0]), 0, canvas=(4, 4)))


def test_a_class_whose_boxes_hold_no_pixel_centre_gets_the_pixels_of_their_centres():
    """1-pixel boxes in a 400 × 400 image rasterised at 32 × 32 (12.5 image pixels per mask pixel) held no centre and
    vanished: guidance silently went off for them and their EPG was 0. Now each such box covers the mask pixel
    holding its centre — only when the class's mask would otherwise be empty."""
    boxes = torch.tensor([[100.0, 200.0, 101.0, 201.0], [399.0, 0.0, 400.0, 1.0], [20.0, 20.0, 20.5, 20.5]])
    masks = boxes_to_masks(boxes, torch.tensor([0, 0, 1]), [0, 1, 2], size=(32, 32), canvas=(400, 400))
    expected = torch.zeros(3, 32, 32, dtype=torch.bool)
    expected[0, 16, 8] = expected[0, 0, 31] = True  # centres (100.5, 200.5), (399.5, 0.5) → (8.04, 16.04), (31.96, 0.04)
    expected[1, 1, 1] = True  # (20.25, 20.25) → (1.62, 1.62)
    assert torch.equal(masks, expected)  # class 2 has no box: empty
    big_and_tiny = torch.tensor([[0.0, 0.0, 200.0, 200.0], [300.0, 300.0, 301.0, 301.0]])
    assert torch.equal(boxes_to_masks(big_and_tiny, torch.tensor([0, 0]), 0, size=(32, 32), canvas=(400, 400)),
                       boxes_to_masks(big_and_tiny[:1], torch.tensor([0]), 0, size=(32, 32), canvas=(400, 400)))
    assert not boxes_to_masks(torch.tensor([[5.0, 5.0, 5.0, 9.0]]), torch.tensor([0]), 0, canvas=(16, 16)).any()


def test_boxes_sharing_an_edge_never_share_a_pixel():
    left = boxes_to_masks(torch.tensor([[0.0, 0.0, 2.5, 4.0]]), torch.tensor([0]), 0, canvas=(4, 4))
    right = boxes_to_masks(torch.tensor([[2.5, 0.0, 4.0, 4.0]]), torch.tensor([0]), 0, canvas=(4, 4))
    assert not (left & right).any() and (left | right).all()


def test_the_rule_holds_at_other_resolutions():
    boxes = torch.tensor([[8.0, 16.0, 40.0, 48.0]])
    assert torch.equal(boxes_to_masks(boxes, torch.tensor([0]), 0, size=(8, 8), canvas=(64, 64)),
                       boxes_to_masks(boxes / 8, torch.tensor([0]), 0, canvas=(8, 8)))


def test_masks_are_the_union_of_a_class_s_boxes_only():
    boxes = torch.tensor([[0.0, 0.0, 2.0, 2.0], [3.0, 3.0, 4.0, 4.0], [1.0, 1.0, 3.0, 3.0]])
    masks = boxes_to_masks(boxes, torch.tensor([1, 1, 2]), [1, 2, 5], canvas=(4, 4))
    assert masks.shape == (3, 4, 4)
    assert masks[0].sum() == 5 and masks[1].sum() == 4 and not masks[2].any()


def test_complement_strips_rasterise_to_the_complement():
    generator = torch.Generator().manual_seed(1)
    for box in _random_boxes(generator, 20, 16):
        if not (box[2] > box[0] and box[3] > box[1]):
            continue
        strips = complement_boxes(box, (16, 16))
        inside = boxes_to_masks(box[None], torch.tensor([0]), 0, canvas=(16, 16))
        outside = boxes_to_masks(strips, torch.zeros(len(strips), dtype=torch.long), 0, canvas=(16, 16))
        centres = torch.arange(16) + 0.5
        if not (((centres >= box[0]) & (centres < box[2])).any() and ((centres >= box[1]) & (centres < box[3])).any()):
            assert inside.sum() == 1 and outside.all()  # a box holding no pixel centre keeps the one holding its centre
            continue
        assert torch.equal(outside, ~inside)


def test_dilation_grows_each_side_by_a_fraction_and_clips():
    grown = dilate_boxes(torch.tensor([[4.0, 4.0, 8.0, 6.0], [0.0, 0.0, 4.0, 4.0]]), 0.5, (16, 16))
    assert torch.equal(grown, torch.tensor([[2.0, 3.0, 10.0, 7.0], [0.0, 0.0, 6.0, 6.0]]))
    wrapped = dilate_boxes(tv_tensors.BoundingBoxes([[4, 4, 8, 6]], format="XYXY", canvas_size=(16, 16)), 0.5)
    assert isinstance(wrapped, tv_tensors.BoundingBoxes) and canvas_size(wrapped) == (16, 16)


def test_outline_runs_along_the_boundary_of_the_covered_pixels():
    assert outline([2.0, 1.0, 5.0, 3.0]) == (1.5, 0.5, 3.0, 2.0)  # pixel (1, 2) is centred at (2, 1) in imshow


def test_the_training_mask_equals_the_evaluation_mask_of_the_same_boxes():
    """Random boxes, fractional and on the border: the guidance objective's mask of a class is the mask the
    localisation metrics score that class against."""
    generator = torch.Generator().manual_seed(0)
    size, n, classes = 24, 12, 3
    boxes = [_random_boxes(generator, 4, size) for _ in range(n)]
    boxes = [b[(b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])] for b in boxes]
    box_labels = [torch.randint(0, classes, (len(b),), generator=generator) for b in boxes]
    labels = torch.zeros(n, classes)
    for i, lab in enumerate(box_labels):
        labels[i, lab] = 1
    images = torch.rand(n, 6, size, size, generator=generator)

    def zeros(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0], *x.shape[-2:])

    evaluated = {(int(images_index), int(k)): mask for batch in
                 localization_pairs(nn.Identity(), images, labels, boxes, box_labels, zeros, batch_size=5)
                 for images_index, k, mask in zip(batch.image_index, batch.classes, batch.masks)}
    assert len(evaluated) == int(labels.sum())
    objective = GuidanceObjective()
    for (i, k), mask in evaluated.items():
        trained = objective.masks([boxes[i]], [box_labels[i]], torch.tensor([k]), torch.tensor([True]), (size, size))
        assert torch.equal(trained[0], mask), (i, k, boxes[i].tolist())
    dilated = GuidanceObjective(dilation=0.3).masks(boxes, box_labels, labels.argmax(1),
                                                     torch.ones(n, dtype=torch.bool), (size, size))
    assert torch.equal(dilated, class_masks([dilate_boxes(b, 0.3, (size, size)) for b in boxes], box_labels,
                                            labels.argmax(1), (size, size), canvas=(size, size)))


def test_tiny_boxes_guide_training_and_score_evaluation_on_the_same_pixel():
    """The guidance objective's mask of 1-pixel boxes in 400 × 400 images, resized to 32 px, is the evaluation mask
    and not empty, so the image is annotated (it counted as unannotated and its localisation term was 0)."""
    boxes = [torch.tensor([[100.0, 200.0, 101.0, 201.0]]) * 32 / 400, torch.tensor([[7.0, 7.0, 7.08, 7.08]])]
    box_labels = [torch.tensor([1]), torch.tensor([0])]
    labels = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    trained = GuidanceObjective().masks(boxes, box_labels, torch.tensor([1, 0]), torch.tensor([True, True]), (32, 32))
    evaluated = [batch.masks for batch in localization_pairs(
        nn.Identity(), torch.rand(2, 6, 32, 32), labels, boxes, box_labels,
        lambda model, x, target: torch.zeros(x.shape[0], *x.shape[-2:]), batch_size=5)]
    assert torch.equal(trained, torch.cat(evaluated))
    assert trained.flatten(1).sum(1).tolist() == [1, 1] and trained[0, 16, 8] and trained[1, 7, 7]


def test_energy_loss_is_one_minus_epg_also_in_the_degenerate_cases():
    """One kernel: the Energy loss is ``1 − EPG`` wherever a map holds at least ENERGY_EPS of positive evidence; below
    it the loss follows the Model-Guidance release (the ratio replaced by its numerator) and EPG stays the ratio."""
    generator = torch.Generator().manual_seed(0)
    maps = torch.randn(8, 10, 10, generator=generator, dtype=torch.float64)
    maps[1] = -maps[1].abs()  # no positive evidence
    maps[2] = 0.0
    maps[3] = -1.0
    maps[3, 0, 0] = ENERGY_EPS / 10  # positive evidence below the loss's floor, at one pixel
    maps[4] = maps[4].abs() * 1e-9
    masks = torch.rand(8, 10, 10, generator=generator) > 0.5
    masks[3, 0, 0] = True
    masks[5] = False  # empty mask
    masks[6] = True  # full mask
    loss, scores = energy_loss(maps, masks, reduction="none"), epg(maps, masks)
    tiny = torch.tensor([3, 4])
    normal = torch.tensor([0, 1, 2, 5, 6, 7])
    assert torch.equal(loss[normal], 1 - scores[normal])
    positive = maps[tiny].clamp(min=0)
    assert torch.equal(loss[tiny], 1 - (positive * masks[tiny]).flatten(1).sum(1))  # the release's rule
    assert torch.allclose(scores[tiny], (positive * masks[tiny]).flatten(1).sum(1) / positive.flatten(1).sum(1))
    metric = EnergyPointingGame()
    metric.update(maps, masks)
    assert torch.allclose(metric.compute().double(), scores.mean(), atol=1e-6)
    assert scores[[1, 2, 5]].eq(0).all() and scores[3] == 1 and scores[6] == 1


@pytest.mark.parametrize("scale", [1e-12, 1e-6, 1e6])
def test_epg_does_not_depend_on_the_scale_of_the_map(scale):
    """A freshly B-cosified model's contributions are tiny: its maps must score as the same maps at any scale."""
    generator = torch.Generator().manual_seed(2)
    maps = torch.randn(6, 12, 12, generator=generator)
    masks = torch.rand(6, 12, 12, generator=generator) > 0.6
    assert torch.allclose(epg(maps * scale, masks), epg(maps, masks), rtol=1e-5, atol=0)
    assert epg(maps, masks).gt(0).all()


def test_the_batch_rasterises_each_image_as_it_would_alone():
    """``class_masks`` rasterises a whole batch at once; each image's mask is the one ``boxes_to_masks`` gives it
    alone — fractional, border, sub-pixel and empty box lists, each image on a canvas of its own, at another size."""
    generator = torch.Generator().manual_seed(1)
    boxes, box_labels, targets = [], [], []
    for i in range(9):
        side = 20 + 7 * i
        plain = _random_boxes(generator, i % 4, side)
        boxes.append(tv_tensors.BoundingBoxes(plain, format="XYXY", canvas_size=(side, side)))
        box_labels.append(torch.randint(0, 2, (len(plain),), generator=generator))
        targets.append(i % 2)
    batch = class_masks(boxes, box_labels, torch.tensor(targets), (16, 12))
    alone = torch.stack([boxes_to_masks(b, lab, t, (16, 12)) for b, lab, t in zip(boxes, box_labels, targets)])
    assert torch.equal(batch, alone) and batch.any() and not batch.all()
