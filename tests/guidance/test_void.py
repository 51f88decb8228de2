"""Void pixels (255 in a VOC segmentation PNG: object boundaries; COCO crowds) count neither inside nor outside a
region: left out of EPG, IoU and every localisation loss, as VOC's evaluation leaves them out of both sides of IoU."""

from __future__ import annotations

import pytest
import torch

from rightreasons.data import collate, load_dataset
from rightreasons.guidance import GuidanceObjective, energy_loss, get_loss
from rightreasons.guidance.losses import LOSSES, OUTSIDE_FLOOR
from rightreasons.metrics import epg, iou
from rightreasons.regions import batch_regions, region_masks

H, W = 10, 12


def segmentation() -> torch.Tensor:
    """Class 0 (value 1) on rows 3..6, columns 3..7, a void ring (255) one pixel around it, class 1 in a corner."""
    seg = torch.zeros(H, W, dtype=torch.uint8)
    seg[2:8, 2:9] = 255
    seg[3:7, 3:8] = 1
    seg[0, :2] = 2
    return seg


def test_a_voc_segmentation_png_gives_its_boundary_as_void_for_mask_regions_only(tmp_path, write_voc):
    seg = segmentation().numpy()
    voc = write_voc(tmp_path, {"000001": (H, W, [("aeroplane", 3, 3, 9, 8, 0)])}, {"train": ["000001"]},
                    {"000001": seg})
    batch = collate([load_dataset("voc2007", voc, "train")[0]])
    assert torch.equal(torch.as_tensor(batch["mask"][0]), torch.from_numpy(seg))  # read as written: 255 kept
    inside, void = batch_regions("masks", batch, torch.tensor([0]))
    assert torch.equal(inside[0], torch.from_numpy(seg == 1)) and torch.equal(void[0], torch.from_numpy(seg == 255))
    assert batch_regions("boxes", batch, torch.tensor([0])).void is None  # boxes: no segmentation, no void
    assert torch.equal(batch_regions("masks-else-boxes", batch, torch.tensor([0])).void, void)
    union = batch_regions("union", batch, torch.tensor([0]))  # the box (VOC's 1-based 3..9 x 3..8) covers the ring
    assert torch.equal(union.void[0], torch.from_numpy(seg == 255) & ~union.inside[0])
    assert union.void.sum() < void.sum()


def test_masks_else_boxes_has_no_void_where_the_boxes_were_used():
    seg = segmentation()
    box = torch.tensor([[0.0, 0.0, 4.0, 4.0]])
    made = region_masks("masks-else-boxes", [1, 0], (H, W), [box, box], [torch.tensor([1]), torch.tensor([0])],
                        [seg, seg])
    # class 1 has mask pixels (the corner): its void is the ring; class 0 of image 1 too: both from the mask
    assert made.void[0].sum() == made.void[1].sum() == int((seg == 255).sum())
    made = region_masks("masks-else-boxes", [1], (H, W), [box], [torch.tensor([1])], [torch.zeros_like(seg)])
    assert made.void is None and made.inside.sum() == 16  # no mask pixel of the class: its box, no void


def test_epg_and_iou_leave_the_void_out_of_both_sides():
    seg = segmentation()
    inside, void = (seg == 1)[None], (seg == 255)[None]
    maps = torch.rand(1, H, W, dtype=torch.float64) - 0.3
    positive = maps.clamp(min=0)
    assert epg(maps, inside, void).item() == pytest.approx(
        float((positive * inside).sum() / (positive * ~void).sum()))
    scaled = positive / positive.max()  # min-max of the positive part: its minimum is 0
    binary = (scaled > 0.5) & ~void
    assert iou(maps, inside, 0.5, void=void).item() == pytest.approx(
        float((binary & inside).sum() / (binary | inside).sum()))
    no_void = torch.zeros_like(void)
    assert torch.equal(epg(maps, inside, no_void), epg(maps, inside))  # an empty void changes nothing
    assert torch.equal(iou(maps, inside, void=no_void), iou(maps, inside))
    with pytest.raises(ValueError, match="epg: all maps must have the same shape"):
        epg(maps, inside, void[:, :2])


def test_every_loss_leaves_the_void_out_as_its_formula_says():
    seg = segmentation()
    masks, void = torch.stack([seg == 1, seg == 1]), torch.stack([seg == 255, torch.zeros_like(seg, dtype=torch.bool)])
    maps = (torch.randn(2, H, W, dtype=torch.float64)).requires_grad_()
    m, v = masks.double(), (~void).double()
    a = maps.detach()
    pos = a.clamp(min=0)
    hat_pos = pos / pos.flatten(1).amax(1)[:, None, None]
    hat = a / a.abs().flatten(1).amax(1)[:, None, None]
    energy = 1 - (pos * m).flatten(1).sum(1) / (pos * v).flatten(1).sum(1)
    share = (m * v).flatten(1).sum(1) / v.flatten(1).sum(1)
    expected = {"energy": energy,
                "energy-size": energy / (1 - share).clamp(min=OUTSIDE_FLOOR),
                "l1": ((m - hat_pos).abs() * v).flatten(1).sum(1) / v.flatten(1).sum(1),
                "rrr": ((1 - m) * v * hat.square()).flatten(1).sum(1),
                "ppce": get_loss("ppce")(a, masks, "none")}  # reads the region only: unchanged
    for name in LOSSES:
        got = get_loss(name)(maps, masks, "none", void=void)
        assert torch.allclose(got.detach(), expected[name]), name
        assert torch.equal(got[1], get_loss(name)(maps, masks, "none")[1]), name  # image 1 has no void
    grad, = torch.autograd.grad(energy_loss(maps, masks, "sum", void=void), maps)
    assert not grad[0][void[0]].any() and grad[0][~void[0]].any()  # a void pixel's evidence is neither here nor there
    with pytest.raises(ValueError, match="energy_loss: void must be a bool tensor"):
        energy_loss(maps, masks, void=void.double())


def test_a_guided_step_trains_without_the_void(tiny_bcos_resnet):
    torch.manual_seed(0)
    model = tiny_bcos_resnet(2).eval()
    seg = segmentation()
    images = torch.rand(2, 6, H, W)
    labels = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    no_boxes = [torch.zeros(0, 4), torch.zeros(0, 4)]
    no_labels = [torch.zeros(0, dtype=torch.long)] * 2
    objective = GuidanceObjective(method="bcos", layer="input", loss="energy", regions="masks", reduction="none")
    out = objective(model, images, labels, no_boxes, no_labels, torch.tensor([True, True]),
                    segmentations=torch.stack([seg, seg]))
    void = torch.stack([seg == 255, seg == 255])
    assert torch.allclose(out.loss, energy_loss(out.attributions, out.masks, "none", void=void))
    assert not torch.allclose(out.loss, energy_loss(out.attributions, out.masks, "none"))
    boxes = GuidanceObjective(method="bcos", layer="input", loss="energy", regions="boxes", reduction="none")
    box = [torch.tensor([[3.0, 3.0, 8.0, 7.0]])] * 2
    by_box = boxes(model, images, labels, box, [torch.tensor([0])] * 2, torch.tensor([True, True]),
                   segmentations=torch.stack([seg, seg]))
    assert torch.equal(by_box.masks, out.masks)  # the same region; the boxes' loss counts the ring as outside
    assert torch.allclose(by_box.loss, energy_loss(by_box.attributions, by_box.masks, "none"))


@pytest.mark.usefixtures("fresh_dynamo")
def test_a_compiled_guided_step_leaves_the_void_out_as_the_eager_one_does():
    import torch.nn.functional as F

    import rightreasons

    torch.manual_seed(0)
    model = rightreasons.create_model("bcos_resnet18", num_classes=2, inplanes=4).train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    seg = torch.zeros(32, 32, dtype=torch.uint8)
    seg[6:26, 6:26] = 255
    seg[8:24, 8:24] = 1
    images, labels = torch.rand(2, 6, 32, 32), torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    no_boxes, no_labels = [torch.zeros(0, 4)] * 2, [torch.zeros(0, dtype=torch.long)] * 2

    def step(compile):
        model.load_state_dict(state)
        model.zero_grad(set_to_none=True)
        objective = GuidanceObjective("bcos", "input", "energy", regions="masks", compile=compile)
        out = objective(model, images, labels, no_boxes, no_labels, torch.tensor([True, True]),
                        torch.Generator().manual_seed(0), segmentations=torch.stack([seg, seg]))
        (F.binary_cross_entropy_with_logits(out.logits, labels) + out.loss).backward()
        return out, torch.cat([p.grad.flatten() for p in model.parameters()])

    (eager, eager_grad), (compiled, compiled_grad) = step("no"), step("aot_eager")
    void = torch.stack([seg == 255, seg == 255])
    assert torch.allclose(eager.loss, energy_loss(eager.attributions.detach(), eager.masks, void=void))
    torch.testing.assert_close(compiled.loss, eager.loss, rtol=1e-4, atol=1e-6)  # float32 rounding of the trace
    assert torch.allclose(compiled.loss, energy_loss(compiled.attributions.detach(), compiled.masks, void=void))
    assert not torch.allclose(compiled.loss, energy_loss(compiled.attributions.detach(), compiled.masks), rtol=1e-3)
    # float32 rounding of the traced B-cos units: 4e-4 of the norm here, as much with boxes and no void
    assert (compiled_grad - eager_grad).norm() <= 1e-3 * eager_grad.norm()
