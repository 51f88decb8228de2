"""``eval.regions``: evaluation, ``evaluate``, the viewer and ``judge`` score EPG and IoU against boxes (the default),
masks, point discs, masks-else-boxes or their union, built by the one region builder guidance uses
(``rightreasons.regions``), with a segmentation's void pixels left out."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import rightreasons
from rightreasons.apps.cli import main
from rightreasons.choices import REGION_NAMES
from rightreasons.classification import ClassificationConfig
from rightreasons.config import from_dict
from rightreasons.data import collate, load_dataset, transforms_for
from rightreasons.errors import ConfigError
from rightreasons.explain import attribute
from rightreasons.guidance import GuideConfig
from rightreasons.metrics import epg as epg_of
from rightreasons.metrics.evaluation import score_model
from rightreasons.models import save_model
from rightreasons.models.preprocessing import recorded_crop
from rightreasons.regions import REGIONS, batch_regions

SIZE = 32


def _images(root, names):
    rng = np.random.default_rng(7)
    for name in names:
        Image.fromarray(rng.integers(0, 255, (SIZE, SIZE, 3), np.uint8)).save(root / name)


def _model(path):
    torch.manual_seed(0)
    model = rightreasons.create_model("bcos_resnet18", num_classes=2, inplanes=4).eval()
    save_model(model, path, classes=["cat", "dog"])
    return model


def test_region_names_offered_by_the_command_line_are_the_builders_choices():
    assert tuple(REGIONS) == REGION_NAMES


def test_eval_regions_is_a_checked_config_key_independent_of_guidance_regions():
    assert from_dict(ClassificationConfig, {}).eval.regions == "boxes"
    guided = from_dict(GuideConfig, {"guidance": {"regions": "masks"}})
    assert guided.eval.regions == "boxes"  # scored as its baseline is, whatever it trained on
    assert from_dict(GuideConfig, {"eval": {"regions": "masks", "point_radius": 4}}).eval.point_radius == 4
    with pytest.raises(ConfigError, match="regions"):
        from_dict(ClassificationConfig, {"eval": {"regions": "polygons"}})
    with pytest.raises(ConfigError, match="point_radius"):
        from_dict(ClassificationConfig, {"eval": {"point_radius": -1}})


def test_a_rectangle_mask_equal_to_a_box_scores_exactly_the_box_epg_and_iou(tmp_path):
    """A folder dataset whose mask PNG covers exactly the box's pixels: score_model against masks equals boxes."""
    root = tmp_path / "own"
    root.mkdir()
    _images(root, ["a.png", "b.png"])
    mask = np.zeros((SIZE, SIZE), np.uint8)
    mask[6:22, 4:20] = 255  # rows 6..21, columns 4..19: the pixels whose centres lie in the box 4, 6, 20, 22
    Image.fromarray(mask, "L").save(root / "m.png")
    (root / "labels.csv").write_text("image,class\na.png,cat\nb.png,dog\n")
    (root / "notes.csv").write_text("image,class,x1,y1,x2,y2,mask\na.png,cat,4,6,20,22,m.png\n"
                                    "b.png,dog,4,6,20,22,m.png\n")
    model = _model(tmp_path / "model.safetensors")

    def scored(regions):
        dataset = load_dataset("folder", str(root), "train", labels="labels.csv", annotations="notes.csv")
        return score_model(model, dataset, image_size=SIZE, method="bcos", layer="input", batch_size=2,
                           regions=regions)

    by_box, by_mask = scored("boxes"), scored("masks")
    assert by_box["regions"] == "boxes" and by_mask["regions"] == "masks"
    assert by_box["epg"] == by_mask["epg"] and by_box["iou"] == by_mask["iou"]
    assert 0 < by_box["epg"] < 1
    assert scored("masks-else-boxes")["epg"] == by_box["epg"] == scored("union")["epg"]
    with pytest.raises(ValueError, match="regions must be one of"):
        scored("polygons")


CONFIG = """\
output_dir: run
cpu: true
model: {name: bcos_resnet18, kwargs: {inplanes: 4}}
data: {name: coco-json, root: ROOT, image_size: 32, batch_size: 2, eval_batch_size: 2,
       options: {files: {train: train.json, val: val.json}}}
eval: {num_images: 0}
"""


def _coco(root):
    """A coco-json split ``val.json``: image a.png with a cat polygon (a rectangle, bbox elsewhere) and a crowd
    region (void under ``crowd: label``) beside it; image b.png with a dog box only."""
    root.mkdir()
    _images(root, ["a.png", "b.png"])
    crowd = np.zeros((SIZE, SIZE), np.uint8, order="F")
    crowd[20:30, 20:30] = 1
    from pycocotools import mask as mask_utils
    rle = mask_utils.encode(crowd)
    data = {"categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}],
            "images": [{"id": 1, "file_name": "a.png", "width": SIZE, "height": SIZE},
                       {"id": 2, "file_name": "b.png", "width": SIZE, "height": SIZE}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 30, 30], "iscrowd": 0,
                             "segmentation": [[4, 6, 20, 6, 20, 22, 4, 22]]},
                            {"id": 2, "image_id": 1, "category_id": 1, "bbox": [20, 20, 10, 10], "iscrowd": 1,
                             "segmentation": {"size": [SIZE, SIZE], "counts": rle["counts"].decode()}},
                            {"id": 3, "image_id": 2, "category_id": 2, "bbox": [2, 2, 12, 12], "iscrowd": 0,
                             "segmentation": []}]}
    for split in ("train", "val"):
        (root / f"{split}.json").write_text(json.dumps(data))
    return root


def _formula(model, root, regions, threshold=0.5):
    """EPG and IoU by their formulas on the model's maps, from the samples' own masks and boxes drawn by hand."""
    dataset = load_dataset("coco-json", str(root), "val", files={"train": "train.json", "val": "val.json"})
    dataset.transform = transforms_for(model, SIZE, crop_fraction=recorded_crop(model))  # as score_model does
    batch = collate([dataset[i] for i in range(len(dataset))])
    targets = batch["labels"].argmax(1)
    maps = attribute(model, batch["image"], targets, "bcos", "input").maps.detach()
    epgs, ious = [], []
    for n in range(len(targets)):
        seg = batch["mask"][n]
        if regions == "masks":
            if seg is None or not (seg == targets[n] + 1).any():
                continue
            inside, counted = seg == targets[n] + 1, seg != 255
        else:
            inside = torch.zeros(SIZE, SIZE, dtype=torch.bool)
            for (x1, y1, x2, y2), k in zip(batch["boxes"][n].tolist(), batch["box_labels"][n].tolist()):
                if k == targets[n]:
                    inside[int(y1):int(y2), int(x1):int(x2)] = True  # integer boxes: the pixel-centre rule
            counted = torch.ones_like(inside)
        positive = maps[n].clamp(min=0)
        epgs.append(float((positive * inside).sum() / (positive * counted).sum()))
        scaled = (positive - positive.min()) / (positive.max() - positive.min())
        binary = (scaled > threshold) & counted
        ious.append(float((binary & inside).sum() / (binary | inside).sum()))
    return sum(epgs) / len(epgs), sum(ious) / len(ious), len(epgs)


def test_evaluate_with_masks_on_a_coco_json_split_gives_the_formulas_value_without_the_void(tmp_path, monkeypatch,
                                                                                          capsys):
    root = _coco(tmp_path / "pets")
    (tmp_path / "config.yaml").write_text(CONFIG.replace("ROOT", str(root)))
    model = _model(tmp_path / "model.safetensors")
    monkeypatch.chdir(tmp_path)
    args = ["evaluate", "--checkpoint", "model.safetensors", "--config", "config.yaml", "--split", "val"]
    assert main([*args, "--regions", "masks", "eval.iou_threshold=0", "--out", "masks.json"]) == 0
    assert main([*args, "--out", "default.json"]) == 0
    assert main([*args, "eval.regions=masks", "--out", "config.json"]) == 0
    by_mask, default, configured = (json.loads((tmp_path / f"{n}.json").read_text())
                                    for n in ("masks", "default", "config"))
    epg, iou, pairs = _formula(model, root, "masks", threshold=0.0)
    assert pairs == 1 and by_mask["regions"] == "masks" and iou > 0  # only a.png has a mask of its class
    assert by_mask["epg"] == pytest.approx(epg, abs=1e-6) and by_mask["iou"] == pytest.approx(iou, abs=1e-6)
    box_epg, box_iou, box_pairs = _formula(model, root, "boxes")
    assert box_pairs == 2 and default["regions"] == "boxes"  # the default: boxes, results as before
    assert default["epg"] == pytest.approx(box_epg, abs=1e-6) and default["iou"] == pytest.approx(box_iou, abs=1e-6)
    assert configured["epg"] == by_mask["epg"]  # --regions and eval.regions are one setting
    with pytest.raises(SystemExit):
        main([*args, "--regions", "polygons"])
    assert "invalid choice: 'polygons'" in capsys.readouterr().err


def test_the_void_is_what_sets_the_masks_score_apart(tmp_path):
    """Without the crowd's void the same map scores the plain formula: the crowd pixels count as outside."""
    root = _coco(tmp_path / "pets")
    model = _model(tmp_path / "model.safetensors")
    dataset = load_dataset("coco-json", str(root), "val", files={"train": "train.json", "val": "val.json"})
    dataset.transform = transforms_for(model, SIZE, crop_fraction=recorded_crop(model))  # as score_model does
    batch = collate([dataset[0]])
    inside, void = batch_regions("masks", batch, torch.tensor([0]))
    assert int(void.sum()) == 100 and not (inside & void).any()  # the 10 x 10 crowd region
    assert batch_regions("boxes", batch, torch.tensor([0])).void is None  # boxes never read the segmentation
    union = batch_regions("union", batch, torch.tensor([0]))
    assert not union.void.any()  # the cat's 30 x 30 box covers the crowd region: inside, not void
    maps = attribute(model, batch["image"], torch.tensor([0]), "bcos", "input").maps.detach()
    positive = maps.clamp(min=0)
    with_void = epg_of(maps, inside, void)
    without = epg_of(maps, inside)
    assert with_void == pytest.approx(float((positive * inside).sum() / (positive * ~void).sum()))
    assert without == pytest.approx(float((positive * inside).sum() / positive.sum())) and with_void > without


def test_judge_and_view_score_against_the_regions_asked_for(tmp_path, monkeypatch):
    from rightreasons.judging import JudgedModel, judge

    root = _coco(tmp_path / "pets")
    model = _model(tmp_path / "model.safetensors")
    dataset = load_dataset("coco-json", str(root), "val", files={"train": "train.json", "val": "val.json"})
    judged = [JudgedModel("m", model, SIZE)]
    by_mask = judge(judged, dataset, [("bcos", "input")], ("epg", "iou"), regions="masks").scores
    by_box = judge(judged, dataset, [("bcos", "input")], ("epg", "iou"), regions="boxes").scores
    epg, iou, _ = _formula(model, root, "masks")
    assert by_mask[0]["epg"] == pytest.approx(epg, abs=1e-6) and by_mask[0]["iou"] == pytest.approx(iou, abs=1e-6)
    assert np.isnan(by_mask[1]["epg"])  # b.png has no mask: not scored
    box_epg, _, _ = _formula(model, root, "boxes")
    assert (by_box[0]["epg"] + by_box[1]["epg"]) / 2 == pytest.approx(box_epg, abs=1e-6)
    with pytest.raises(ValueError, match="--regions must be one of"):
        judge(judged, dataset, [("bcos", "input")], ("epg",), regions="polygons")


def test_the_viewer_scores_each_image_against_the_regions_asked_for(tmp_path):
    from pathlib import Path

    from rightreasons.viewer import ViewedRun
    from rightreasons.viewer.records import run_records

    root = _coco(tmp_path / "pets")
    model = _model(tmp_path / "model.safetensors")
    config = from_dict(ClassificationConfig, {"data": {"name": "coco-json", "root": str(root), "image_size": SIZE}})
    dataset = load_dataset("coco-json", str(root), "val", files={"train": "train.json", "val": "val.json"})
    dataset.transform = transforms_for(model, SIZE, crop_fraction=recorded_crop(model))
    samples = [dataset[i] for i in range(len(dataset))]
    run = ViewedRun("m", Path("m"), model, config, {})
    by_mask = run_records(run, samples, dataset, "bcos", "input", regions="masks")
    epg, _, _ = _formula(model, root, "masks")
    assert by_mask[0]["epg"] == round(epg, 4) and by_mask[1]["epg"] is None  # b.png has no mask
    by_box = run_records(run, samples, dataset, "bcos", "input")
    assert by_box[1]["epg"] is not None and by_box[0]["epg"] != by_mask[0]["epg"]
