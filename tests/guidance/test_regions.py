"""Regions beyond boxes: a class's region from its boxes, segmentation mask and points (rightreasons.regions), guided
by every loss and scored by EPG/IoU; the size-corrected Energy loss; mixed and partial annotation in one batch."""

import pytest
import torch

from rightreasons.boxes import boxes_to_masks, point_masks
from rightreasons.config import from_dict
from rightreasons.errors import ConfigError
from rightreasons.guidance import GuidanceConfig, GuidanceObjective, energy_loss, energy_size_loss, get_loss
from rightreasons.guidance.losses import LOSSES
from rightreasons.metrics import EnergyPointingGame, IoU, epg, evaluate_localization, iou
from rightreasons.metrics.localization_pairs import Regions
from rightreasons.regions import REGIONS, class_regions

SIZE = (12, 14)
BOX = torch.tensor([[2.0, 3.0, 9.0, 10.0]])  # XYXY: rows 3..9, columns 2..8


def rectangle_mask(k: int) -> torch.Tensor:
    """A VOC-convention segmentation ``[12, 14]`` holding class ``k`` (value k + 1) exactly on :data:`BOX`, with a
    void border (255) around it and another class elsewhere."""
    seg = torch.zeros(SIZE, dtype=torch.uint8)
    seg[2:11, 1:10] = 255
    seg[3:10, 2:9] = k + 1
    seg[0, :3] = k + 2
    return seg


def test_a_rectangle_mask_is_the_box_region_and_gives_exactly_the_box_loss_and_gradient_for_every_loss():
    k = torch.tensor([1, 1])
    by_box = class_regions("boxes", k, SIZE, [BOX, BOX], [torch.tensor([1]), torch.tensor([1])])
    by_mask = class_regions("masks", k, SIZE, [BOX[:0]] * 2, [torch.tensor([], dtype=torch.long)] * 2,
                            torch.stack([rectangle_mask(1)] * 2))
    assert torch.equal(by_box, by_mask) and by_box[0].sum() == 49
    maps = torch.randn(2, *SIZE, dtype=torch.float64, requires_grad=True)
    for name in LOSSES:
        box_loss, mask_loss = get_loss(name)(maps, by_box), get_loss(name)(maps, by_mask)
        assert torch.equal(box_loss, mask_loss), name
        box_grad, = torch.autograd.grad(box_loss, maps)
        mask_grad, = torch.autograd.grad(mask_loss, maps)
        assert torch.equal(box_grad, mask_grad), name
    assert torch.equal(epg(maps.detach(), by_box), epg(maps.detach(), by_mask))
    assert torch.equal(iou(maps.detach(), by_box), iou(maps.detach(), by_mask))


def test_point_discs_cover_centres_within_the_radius_and_always_the_points_own_pixel():
    points, labels = [torch.tensor([[5.5, 4.5], [0.2, 0.2], [20.0, 3.0]])], [torch.tensor([0, 0, 0])]
    disc = point_masks(points, labels, torch.tensor([0]), SIZE, 2.0, SIZE)[0]
    rows, cols = torch.meshgrid(torch.arange(SIZE[0]) + 0.5, torch.arange(SIZE[1]) + 0.5, indexing="ij")
    expected = (cols - 5.5) ** 2 + (rows - 4.5) ** 2 <= 4.0  # the disc around (5.5, 4.5): 13 pixels
    expected |= (cols - 0.2) ** 2 + (rows - 0.2) ** 2 <= 4.0  # the corner point's disc, clipped by the image
    assert torch.equal(disc, expected) and int(expected.sum()) == 13 + 4  # the point at x = 20 is outside: nothing
    tiny = point_masks([torch.tensor([[3.2, 7.9]])], [torch.tensor([2])], torch.tensor([2]), SIZE, 0.0, SIZE)[0]
    assert tiny.nonzero().tolist() == [[7, 3]]  # radius 0: the pixel that holds the point
    coarse = point_masks([torch.tensor([[13.0, 11.0]])], [torch.tensor([0])], torch.tensor([0]), (3, 7), 0.0, SIZE)
    assert coarse[0].nonzero().tolist() == [[2, 6]]  # the same rule at another resolution
    other = point_masks(points, labels, torch.tensor([1]), SIZE, 2.0, SIZE)
    assert not other.any()  # points of another class
    with pytest.raises(ValueError, match="radius must be >= 0"):
        point_masks(points, labels, torch.tensor([0]), SIZE, -1.0, SIZE)
    with pytest.raises(ValueError, match="image 0: got 3 points but 2 point labels"):
        point_masks(points, [torch.tensor([0, 0])], torch.tensor([0]), SIZE, 2.0, SIZE)


def test_every_choice_of_regions_on_images_with_a_mask_boxes_points_or_nothing():
    k = torch.tensor([0, 0, 0, 0])
    other_box = torch.tensor([[0.0, 0.0, 3.0, 2.0]])
    boxes = [other_box, BOX, other_box[:0], other_box[:0]]  # image 0 has a box and a mask, 1 a box, 2 a point, 3 none
    box_labels = [torch.tensor([0]), torch.tensor([0]), torch.tensor([], dtype=torch.long),
                  torch.tensor([], dtype=torch.long)]
    segmentations = [rectangle_mask(0), None, None, None]
    points = [torch.zeros(0, 2), torch.zeros(0, 2), torch.tensor([[6.0, 6.0]]), torch.zeros(0, 2)]
    point_labels = [torch.tensor([], dtype=torch.long)] * 2 + [torch.tensor([0]), torch.tensor([], dtype=torch.long)]
    box = boxes_to_masks(BOX, torch.tensor([0]), 0, canvas=SIZE)
    small = boxes_to_masks(other_box, torch.tensor([0]), 0, canvas=SIZE)
    point = point_masks([points[2]], [point_labels[2]], torch.tensor([0]), SIZE, 1.0, SIZE)[0]
    empty = torch.zeros(SIZE, dtype=torch.bool)
    expected = {"boxes": [small, box, empty, empty], "masks": [box, empty, empty, empty],
                "points": [empty, empty, point, empty], "masks-else-boxes": [box, box, empty, empty],
                "union": [box | small, box, point, empty]}
    assert set(expected) == set(REGIONS)
    for regions, want in expected.items():
        got = class_regions(regions, k, SIZE, boxes, box_labels, segmentations, points, point_labels, radius=1.0)
        assert torch.equal(got, torch.stack(want)), regions


def test_a_segmentation_of_another_size_is_refused():
    with pytest.raises(ValueError, match=r"image 0: segmentation of shape \(12, 13\); expected the image's \(12, 14\)"):
        class_regions("masks", torch.tensor([0]), SIZE, [BOX], [torch.tensor([0])], [torch.zeros(12, 13)])


def test_size_corrected_energy_is_one_for_a_uniform_map_whatever_the_region_size():
    uniform = torch.ones(3, *SIZE, dtype=torch.float64)
    masks = torch.zeros(3, *SIZE, dtype=torch.bool)
    masks[0, :2, :2] = True   # a small box
    masks[1, :, :7] = True    # half the image
    masks[2, :, :-1] = True   # nearly all: the weight is capped at 10
    plain = energy_loss(uniform, masks, reduction="none")
    assert plain[1] == pytest.approx(0.5) and plain[0] > plain[1] > plain[2]  # Energy rewards large regions
    corrected = energy_size_loss(uniform, masks, reduction="none")
    assert corrected[:2].tolist() == pytest.approx([1.0, 1.0])
    assert corrected[2].item() == pytest.approx((1 / 14) / 0.1)
    inside = masks.double()  # all evidence inside: 0 either way
    assert energy_size_loss(inside, masks, reduction="none").tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("regions", ["masks", "masks-else-boxes", "union"])
def test_a_mixed_batch_guides_the_images_with_a_region_and_matches_boxes_exactly(regions, tiny_bcos_resnet,
                                                                                bcos_input):
    """Image 0 has a mask, image 1 only boxes, image 2 nothing, image 3 a withheld mask (limited annotations)."""
    torch.manual_seed(0)
    model = tiny_bcos_resnet(num_classes=3).double().train()
    images = bcos_input(4, 16, torch.float64)
    labels = torch.tensor([[0, 1, 0], [0, 1, 0], [0, 1, 0], [0, 1, 0]], dtype=torch.float64)
    seg = torch.zeros(16, 16, dtype=torch.uint8)
    seg[3:10, 2:9] = 2  # class 1 exactly on BOX
    segmentations = [seg, None, None, seg]
    no_box = [BOX[:0], BOX, BOX[:0], BOX[:0]]
    box_labels = [torch.tensor([], dtype=torch.long), torch.tensor([1]), torch.tensor([], dtype=torch.long),
                  torch.tensor([], dtype=torch.long)]
    has = torch.tensor([True, True, True, False])
    guided = GuidanceObjective(loss="energy", regions=regions)(model, images, labels, no_box, box_labels, has,
                                                                segmentations=segmentations)
    boxed = GuidanceObjective(loss="energy")(model, images, labels, [BOX, BOX, BOX[:0], BOX[:0]],
                                             [torch.tensor([1]), torch.tensor([1]), box_labels[2], box_labels[3]],
                                             has)
    mask_only = regions == "masks"
    assert guided.annotated.tolist() == [True, not mask_only, False, False]
    assert torch.equal(guided.masks[0], boxed.masks[0]) and not guided.masks[2:].any()
    params = [p for p in model.parameters() if p.requires_grad]
    if mask_only:  # only image 0 is guided
        boxed = GuidanceObjective(loss="energy")(model, images, labels, [BOX, BOX[:0], BOX[:0], BOX[:0]],
                                                 [torch.tensor([1]), box_labels[0], box_labels[2], box_labels[3]], has)
    assert torch.allclose(guided.loss, boxed.loss, rtol=1e-12, atol=0)
    for g, b in zip(torch.autograd.grad(guided.loss, params, retain_graph=True),
                    torch.autograd.grad(boxed.loss, params, retain_graph=True)):
        assert torch.allclose(g, b, rtol=1e-10, atol=1e-14)


def test_points_guide_through_the_objective():
    objective = GuidanceObjective(regions="points", point_radius=1.0)
    masks = objective.masks([BOX], [torch.tensor([0])], torch.tensor([0]), torch.tensor([True]), SIZE, None,
                            [torch.tensor([[6.0, 6.0]])], [torch.tensor([0])])
    assert torch.equal(masks, point_masks([torch.tensor([[6.0, 6.0]])], [torch.tensor([0])], torch.tensor([0]),
                                          SIZE, 1.0, SIZE))
    withheld = objective.masks([BOX], [torch.tensor([0])], torch.tensor([0]), torch.tensor([False]), SIZE, None,
                               [torch.tensor([[6.0, 6.0]])], [torch.tensor([0])])
    assert not withheld.any()


def test_bad_region_settings_are_refused_before_any_work():
    with pytest.raises(ConfigError, match=r"regions.*'mask'"):
        from_dict(GuidanceConfig, {"regions": "mask"})
    with pytest.raises(ConfigError, match="point_radius"):
        from_dict(GuidanceConfig, {"point_radius": -2})
    with pytest.raises(ValueError, match="regions must be one of boxes, masks, points, masks-else-boxes, union, got "
                                         "'polygons'"):
        GuidanceObjective(regions="polygons")
    with pytest.raises(ValueError, match="point_radius must be >= 0"):
        GuidanceObjective(point_radius=-1.0)
    assert from_dict(GuidanceConfig, {"regions": "masks-else-boxes", "loss": "energy-size"}).regions == \
        "masks-else-boxes"


def test_epg_and_iou_score_every_pair_against_its_region_and_skip_pairs_without_one():
    """Image 0 has a mask of class 1 (and a box elsewhere), image 1 a box of class 1, image 2 only a label."""
    images = torch.zeros(3, 1, *SIZE)
    labels = torch.tensor([[0, 1], [0, 1], [0, 1]])
    boxes = [torch.tensor([[0.0, 0.0, 3.0, 2.0]]), BOX, BOX[:0]]
    box_labels = [torch.tensor([1]), torch.tensor([1]), torch.tensor([], dtype=torch.long)]
    masks = torch.stack([rectangle_mask(1), torch.zeros(SIZE, dtype=torch.uint8), torch.zeros(SIZE, dtype=torch.uint8)])
    box = boxes_to_masks(BOX, torch.tensor([1]), 1, canvas=SIZE).double()

    def inside_box(model, x, target):  # all evidence on BOX, a little outside it
        return (box + 0.25)[None].expand(len(x), *SIZE)

    def scored(regions):
        metrics = [EnergyPointingGame(), IoU()]
        count = evaluate_localization(torch.nn.Identity(), images, labels, boxes, box_labels, inside_box, metrics,
                                      regions=Regions(regions, mask=masks))
        return count, [float(m.compute()) for m in metrics]

    box_epg = 49 * 1.25 / (49 * 1.25 + (14 * 12 - 49) * 0.25)
    mask_epg = 49 * 1.25 / (49 * 1.25 + (14 * 12 - 49 - 32) * 0.25)  # the 32 void pixels around it count nowhere
    assert scored("masks") == (1, pytest.approx([mask_epg, 1.0]))  # only image 0 has a mask
    count, (epg_score, _) = scored("masks-else-boxes")  # image 0 by its mask, image 1 by its box: both BOX
    assert count == 2 and epg_score == pytest.approx((mask_epg + box_epg) / 2)
    count, (epg_score, _) = scored("boxes")  # image 0's box is elsewhere
    assert count == 2 and epg_score < box_epg


GUIDE = """\
output_dir: run
cpu: true
model: {name: bcos_resnet18, kwargs: {inplanes: 4}}
data: {name: folder, root: ROOT, image_size: 32, batch_size: 4, eval_batch_size: 2,
       options: {labels: labels.csv, annotations: notes.csv}}
optim: {epochs: 1}
eval: {num_images: 0, regions: union, point_radius: 3}
checkpoint: {keep_last: 1}
guidance: {regions: union, loss: energy-size, point_radius: 3}
"""


def test_guide_trains_on_one_folder_of_points_boxes_masks_and_unannotated_images(tmp_path, monkeypatch):
    """A point, a box, a mask and nothing in the training batch; validation scores EPG on a box and a mask (its
    ``eval.regions: union``; by default it would score the box only)."""
    import json

    import numpy as np
    from PIL import Image

    from rightreasons.apps.cli import main

    root = tmp_path / "own"
    root.mkdir()
    for name in "abcdef":
        Image.fromarray(np.random.default_rng(ord(name)).integers(0, 255, (32, 32, 3), np.uint8)).save(
            root / f"{name}.png")
    mask = np.zeros((32, 32), np.uint8)
    mask[6:22, 4:20] = 255
    Image.fromarray(mask, "L").save(root / "m.png")
    (root / "labels.csv").write_text("image,class,split\n" + "".join(
        f"{n}.png,{c},{s}\n" for n, c, s in zip("abcdef", ["cat", "dog"] * 3, ["train"] * 4 + ["val"] * 2)))
    (root / "notes.csv").write_text("image,class,x1,y1,x2,y2,x,y,mask\na.png,cat,,,,,10,12,\n"
                                    "b.png,dog,2,3,12,14,,,\nc.png,cat,,,,,,,m.png\ne.png,cat,,,,,,,m.png\n"
                                    "f.png,dog,4,4,20,20,,,\n")
    (tmp_path / "config.yaml").write_text(GUIDE.replace("ROOT", str(root)))
    monkeypatch.chdir(tmp_path)
    assert main(["guide", "--config", "config.yaml"]) == 0
    history = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train, val = (next(r for r in history if r["split"] == split) for split in ("train", "val"))
    assert train["localization"] > 0 and 0 < val["epg"] < 1  # e is scored by its mask, f by its box
