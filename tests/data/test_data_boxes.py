"""Box validation (``rightreasons.data.check_boxes``) and the box geometry the data pipeline uses (dilation,
complements and box → mask rasterisation, ``rightreasons.boxes``)."""

import numpy as np
import pytest
import torch
from torchvision import tv_tensors

from rightreasons.boxes import boxes_to_masks, class_masks, complement_boxes, dilate_boxes
from rightreasons.data import BoxWarning, DataError, check_boxes


def box_mask(h, w, x1, y1, x2, y2):
    m = torch.zeros(h, w, dtype=torch.bool)
    m[y1:y2, x1:x2] = True
    return m


def test_integer_boxes_rasterise_to_their_pixels_and_union_per_class():
    boxes = tv_tensors.BoundingBoxes([[2, 3, 7, 9], [5, 1, 12, 4], [0, 0, 3, 3]], format="XYXY", canvas_size=(10, 16))
    labels = torch.tensor([4, 4, 1])
    m4 = boxes_to_masks(boxes, labels, 4)
    assert m4.dtype == torch.bool and m4.shape == (10, 16)
    assert torch.equal(m4, box_mask(10, 16, 2, 3, 7, 9) | box_mask(10, 16, 5, 1, 12, 4))
    both = boxes_to_masks(boxes, labels, [1, 4, 0])
    assert both.shape == (3, 10, 16)
    assert torch.equal(both[0], box_mask(10, 16, 0, 0, 3, 3)) and torch.equal(both[1], m4) and not both[2].any()


def test_masks_at_other_resolutions_use_pixel_centres():
    boxes = torch.tensor([[0.0, 0.0, 4.0, 6.0]])
    half = boxes_to_masks(boxes, torch.tensor([0]), 0, size=(4, 4), canvas=(8, 8))
    assert torch.equal(half, box_mask(4, 4, 0, 0, 2, 3))
    double = boxes_to_masks(boxes, torch.tensor([0]), 0, size=(16, 16), canvas=(8, 8))
    assert torch.equal(double, box_mask(16, 16, 0, 0, 8, 12))
    # a fractional box: column j is inside iff x1 <= j + 0.5 < x2
    frac = boxes_to_masks(torch.tensor([[1.4, 0.0, 3.6, 1.0]]), torch.tensor([0]), 0, canvas=(1, 5))
    assert frac.tolist() == [[False, True, True, True, False]]


def test_class_masks_batch_and_plain_boxes_need_a_canvas():
    b = [tv_tensors.BoundingBoxes([[0, 0, 2, 2]], format="XYXY", canvas_size=(4, 4)),
         tv_tensors.BoundingBoxes([[2, 2, 4, 4], [0, 0, 1, 1]], format="XYXY", canvas_size=(4, 4))]
    masks = class_masks(b, [torch.tensor([1]), torch.tensor([0, 1])], torch.tensor([1, 0]), (4, 4))
    assert torch.equal(masks[0], box_mask(4, 4, 0, 0, 2, 2)) and torch.equal(masks[1], box_mask(4, 4, 2, 2, 4, 4))
    with pytest.raises(ValueError, match=r"canvas=\(H, W\)"):
        boxes_to_masks(torch.zeros(1, 4), torch.zeros(1), 0)


def test_dilation_moves_each_side_by_the_fraction_and_clips_at_the_border():
    boxes = tv_tensors.BoundingBoxes([[10, 10, 20, 30], [0, 2, 10, 6], [26, 20, 32, 32]], format="XYXY",
                                     canvas_size=(32, 32))
    out = dilate_boxes(boxes, 0.25)
    assert isinstance(out, tv_tensors.BoundingBoxes) and out.canvas_size == (32, 32)
    assert out.tolist() == [[7.5, 5.0, 22.5, 32.0], [0.0, 1.0, 12.5, 7.0], [24.5, 17.0, 32.0, 32.0]]
    assert torch.equal(dilate_boxes(boxes, 0.0), boxes.as_subclass(torch.Tensor))
    with pytest.raises(ValueError):
        dilate_boxes(boxes, -0.1)


@pytest.mark.parametrize("box", [(3, 2, 9, 7), (0, 0, 5, 10), (0, 0, 12, 10), (4, 3, 12, 10)])
def test_complement_boxes_tile_exactly_the_outside_at_every_resolution(box):
    strips = complement_boxes(torch.tensor(box, dtype=torch.float32), (10, 12))
    for size in [(10, 12), (5, 6), (20, 24), (7, 9)]:
        inside = boxes_to_masks(torch.tensor([box], dtype=torch.float32), torch.tensor([0]), 0, size, (10, 12))
        outside = boxes_to_masks(strips, torch.zeros(len(strips)), 0, size, (10, 12))
        assert torch.equal(outside, ~inside)
    # non-overlapping: the areas add up to the image minus the box
    area = ((strips[:, 2] - strips[:, 0]) * (strips[:, 3] - strips[:, 1])).sum()
    assert area == 120 - (box[2] - box[0]) * (box[3] - box[1])


def test_check_boxes_policies():
    good = np.array([[1, 1, 5, 5]], np.float32)
    assert check_boxes(good, [3], (8, 8), "error", "f.xml")[0].tolist() == good.tolist()
    out = np.array([[-2, 1, 5, 9], [1, 1, 4, 4]], np.float32)
    with pytest.raises(DataError, match=r"f\.xml: object 0: .*outside the image"):
        check_boxes(out, [0, 1], (8, 8), "error", "f.xml", ["object 0", "object 1"])
    with pytest.warns(BoxWarning, match=r"f\.xml: box 0: .*clipped"):
        b, lab = check_boxes(out, [0, 1], (8, 8), "clip", "f.xml")
    assert b.tolist() == [[0, 1, 5, 8], [1, 1, 4, 4]] and lab.tolist() == [0, 1]
    degenerate = np.array([[5, 1, 5, 4], [1, 1, 4, 4]], np.float32)
    for policy in ("error", "clip"):
        with pytest.raises(DataError, match=r"g\.json: box 0: .*degenerate"):
            check_boxes(degenerate, [0, 1], (8, 8), policy, "g.json")
    with pytest.warns(BoxWarning, match="degenerate"):
        b, lab = check_boxes(degenerate, [0, 1], (8, 8), "drop", "g.json")
    assert b.tolist() == [[1, 1, 4, 4]] and lab.tolist() == [1]
    with pytest.raises(DataError, match="entirely outside"):
        check_boxes(np.array([[9, 9, 12, 12]], np.float32), [0], (8, 8), "clip", "h")
    with pytest.raises(ValueError, match="box_policy"):
        check_boxes(good, [0], (8, 8), "ignore", "h")
