"""The synthetic benchmark: determinism, groups and correlation, tight boxes, co-occurrence, the on-disk format."""

import json

import numpy as np
import pytest
import torch

from rightreasons.boxes import boxes_to_masks
from rightreasons.apps.cli import main as cli_main
from rightreasons.data import DataError, SyntheticConfig, collate, generate, load_dataset, write_synthetic
from rightreasons.data.synthetic import CONTEXT_OF_SHAPE, SHAPES
from rightreasons.errors import ConfigError


def test_generation_is_deterministic_by_seed():
    a = generate("birds", "train", 40, SyntheticConfig(seed=3))
    b = generate("birds", "train", 40, SyntheticConfig(seed=3))
    c = generate("birds", "train", 40, SyntheticConfig(seed=4))
    assert torch.equal(a.images, b.images) and torch.equal(a.masks, b.masks)
    assert np.array_equal(a.records.boxes, b.records.boxes) and np.array_equal(a.records.groups, b.records.groups)
    assert not torch.equal(a.images, c.images)
    assert not torch.equal(generate("birds", "val", 40, SyntheticConfig(seed=3)).images, a.images)
    m1 = generate("multilabel", "test", 12, SyntheticConfig(seed=1))
    m2 = generate("multilabel", "test", 12, SyntheticConfig(seed=1))
    assert torch.equal(m1.images, m2.images) and m1.images.shape == (12, 3, 64, 64) and m1.images.dtype == torch.uint8


@pytest.mark.parametrize("split, correlation, expected", [
    ("train", 1.0, [50, 0, 0, 50]), ("train", 0.9, [45, 5, 5, 45]),
    ("val", 1.0, [25, 25, 25, 25]), ("val", 0.9, [25, 25, 25, 25]), ("test", 1.0, [25, 25, 25, 25]),
])
def test_bird_groups_follow_the_correlation_exactly(split, correlation, expected):
    data = generate("birds", split, 100 if split != "test" else 100, SyntheticConfig(correlation=correlation, size=32))
    assert np.bincount(data.records.groups, minlength=4).tolist() == expected
    y = data.records.labels.argmax(1)
    assert np.array_equal(data.records.groups // 2, y)  # group = 2·y + place
    assert data.records.labels.sum(1).tolist() == [1] * 100


def test_boxes_are_tight_around_the_object_pixels():
    for task in ("birds", "multilabel"):
        data = generate(task, "train", 24, SyntheticConfig(size=48, difficulty=0.8))
        for i in range(24):
            boxes, box_labels = data.records.boxes_of(i)
            assert sorted(box_labels.tolist()) == np.flatnonzero(data.records.labels[i]).tolist()
            for box, k in zip(torch.from_numpy(boxes), box_labels):
                obj = data.masks[i] == k + 1
                ys, xs = torch.nonzero(obj, as_tuple=True)
                assert box.tolist() == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
                inside = boxes_to_masks(box[None], torch.tensor([k]), int(k), canvas=(48, 48))
                assert not (obj & ~inside).any()


@pytest.mark.parametrize("task, size, difficulty", [("birds", 32, 0.5), ("birds", 32, 1.0), ("birds", 64, 0.0),
                                                    ("multilabel", 48, 0.8)])
def test_every_object_has_one_point_on_its_own_pixels_near_its_centre(task, size, difficulty):
    """One click per object, labelled as its box: the pixel ``(⌊x⌋, ⌊y⌋)`` of the point is one of the object's
    (also for the multi-label ring and cross, whose centroid may be off the object), at the pixel centre, and no other
    object pixel is nearer the centroid of the object's pixel centres."""
    data = generate(task, "train", 40, SyntheticConfig(size=size, difficulty=difficulty, seed=2))
    rings = 0
    for i in range(40):
        points, point_labels = data.records.points_of(i)
        boxes, box_labels = data.records.boxes_of(i)
        assert point_labels.tolist() == box_labels.tolist() and points.shape == (len(boxes), 2)
        for (x, y), k in zip(points.tolist(), point_labels.tolist()):
            obj = data.masks[i] == k + 1
            assert x % 1 == 0.5 and y % 1 == 0.5 and obj[int(y), int(x)], (i, x, y)
            ys, xs = torch.nonzero(obj, as_tuple=True)
            cx, cy = xs.float().mean() + 0.5, ys.float().mean() + 0.5
            nearest = ((xs + 0.5 - cx) ** 2 + (ys + 0.5 - cy) ** 2).min()
            assert (x - cx) ** 2 + (y - cy) ** 2 == pytest.approx(float(nearest), abs=1e-4)
            rings += SHAPES[k] == "ring" and not bool(obj[int(cy), int(cx)])  # its centroid off the object
    assert task == "birds" or rings > 0  # the case the rule is for was drawn


def test_points_are_deterministic_by_data_seed():
    a, b = (generate("birds", "train", 60, SyntheticConfig(size=32, seed=7)) for _ in range(2))
    c = generate("birds", "train", 60, SyntheticConfig(size=32, seed=8))
    assert np.array_equal(a.records.points, b.records.points) and len(a.records.points) == 60
    assert np.array_equal(a.records.point_labels, b.records.point_labels)
    assert not np.array_equal(a.records.points, c.records.points)


def test_object_pixels_differ_from_the_background_without_colour():
    data = generate("birds", "test", 16, SyntheticConfig(difficulty=0.0))
    grey = data.images.float().mean(1)
    obj = data.masks > 0
    for i in range(16):
        assert (grey[i][obj[i]].mean() - grey[i][~obj[i]].mean()).abs() > 25


def test_multilabel_context_cooccurs_with_its_classes():
    data = generate("multilabel", "train", 300, SyntheticConfig(size=32, correlation=1.0, max_objects=2))
    counts = data.records.labels.sum(1)
    assert counts.min() == 1 and counts.max() == 2 and set(data.records.groups.tolist()) == {0, 1, 2}
    affine = np.array(CONTEXT_OF_SHAPE)
    single = [i for i in range(300) if (affine[data.records.labels[i]] >= 0).sum() == 1]
    assert len(single) > 50
    for i in single:
        k = [c for c in np.flatnonzero(data.records.labels[i]) if affine[c] >= 0][0]
        assert data.records.groups[i] == affine[k]
    free = generate("multilabel", "train", 300, SyntheticConfig(size=32, correlation=0.0))
    disc = free.records.labels[:, SHAPES.index("disc")]
    shares = np.bincount(free.records.groups[disc], minlength=3) / disc.sum()
    assert shares.min() > 0.2


def test_written_format_reads_back_identically(tmp_path):
    config = SyntheticConfig(size=32, seed=5, sizes={"train": 10, "test": 6})
    path = write_synthetic(tmp_path / "birds", "synthetic-birds", config, splits=("train", "test"))
    index = json.loads(path.read_text())
    assert index["format"] == "rightreasons-synthetic" and index["classes"] == ["landbird", "waterbird"]
    assert index["splits"]["train"][0]["image"] == "train/images/000000.png"
    disk = load_dataset("synthetic-birds", tmp_path / "birds", "test")
    memory = load_dataset("synthetic-birds", None, "test", n=6, size=32, seed=5)
    assert len(disk) == len(memory) == 6
    for i in range(6):
        a, b = disk[i], memory[i]
        for key in ("image", "labels", "boxes", "box_labels", "mask", "points", "point_labels"):
            assert torch.equal(a[key], b[key]), key
        assert a["group"] == b["group"] and a["id"] == b["id"]
    assert disk.group_names == memory.group_names == ("G1 landbird/land", "G2 landbird/water", "G3 waterbird/land",
                                                       "G4 waterbird/water")
    with pytest.raises(ConfigError, match="fixed by its index.json"):
        load_dataset("synthetic-birds", tmp_path / "birds", "test", size=64)
    with pytest.raises(DataError, match="no split 'val'"):
        load_dataset("synthetic-birds", tmp_path / "birds", "val")
    with pytest.raises(DataError, match="holds 'synthetic-birds', not 'synthetic-multilabel'"):
        load_dataset("synthetic-multilabel", tmp_path / "birds", "test")


def test_an_index_of_version_1_reads_without_points_and_unknown_versions_are_refused(tmp_path):
    """Version 2 added the points; a dataset written before (version 1, records without points) still loads, as a
    dataset without points; an index of a version this library does not know is one error naming it."""
    path = write_synthetic(tmp_path, "synthetic-birds", SyntheticConfig(size=32, sizes={"test": 4}), splits=("test",))
    index = json.loads(path.read_text())
    assert index["version"] == 2 and index["splits"]["test"][0]["points"] and index["splits"]["test"][0]["point_labels"]
    for record in index["splits"]["test"]:
        del record["points"], record["point_labels"]
    path.write_text(json.dumps({**index, "version": 1}))
    old = load_dataset("synthetic-birds", tmp_path, "test")
    assert old.records.points is None and "points" not in old[0] and old[0]["boxes"].shape == (1, 4)
    with pytest.raises(DataError, match=r"splits\.test\[0\]: malformed record \(KeyError: 'points'\)"):
        path.write_text(json.dumps(index))  # version 2 without points
        load_dataset("synthetic-birds", tmp_path, "test")
    path.write_text(json.dumps({**index, "version": 3}))
    with pytest.raises(DataError, match=r"index of version 3; this version of rightreasons reads versions 1, 2 "
                                        r"\(write the data again"):
        load_dataset("synthetic-birds", tmp_path, "test")


def test_groups_are_named_by_what_they_mean_and_grouped_metrics_use_the_names():
    from rightreasons import create_model
    from rightreasons.data import eval_transform
    from rightreasons.data.synthetic import CONTEXTS
    from rightreasons.metrics.evaluation import classifier_evaluators, evaluate

    shapes = load_dataset("synthetic-multilabel", None, "val", n=12, size=32, max_objects=1,
                          transform=eval_transform(32, encoding="bcos", crop_fraction=1.0))
    assert shapes.group_names == CONTEXTS == ("grass", "water", "sand")
    # the bool labels share the records' memory (no float copy) and agree with the float ones
    assert shapes.positive_labels.dtype == torch.bool and torch.equal(shapes.positive_labels.float(), shapes.labels)
    assert np.shares_memory(shapes.positive_labels.numpy(), shapes.records.labels)
    torch.manual_seed(0)
    results = evaluate(create_model("bcos_cifar10_resnet20", num_classes=len(SHAPES), inplanes=8), shapes,
                       classifier_evaluators(shapes, method=None), batch_size=6, device=torch.device("cpu"))
    present = {CONTEXTS[g] for g in shapes.groups.tolist()}
    assert {key.split("/", 1)[1] for key in results if key.startswith("accuracy/")} == present


def test_malformed_index_is_named(tmp_path):
    write_synthetic(tmp_path, "synthetic-multilabel", SyntheticConfig(size=32, sizes={"train": 3}), splits=("train",))
    index = json.loads((tmp_path / "index.json").read_text())
    index["splits"]["train"][1]["box_labels"] = [99]
    good = (tmp_path / "index.json").read_text()
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(DataError, match=r"index\.json: splits\.train\[1\]: malformed record"):
        load_dataset("synthetic-multilabel", tmp_path, "train")
    (tmp_path / "index.json").write_text("{not json")
    with pytest.raises(DataError, match=r"index\.json: malformed JSON"):
        load_dataset("synthetic-multilabel", tmp_path, "train")
    with pytest.raises(DataError, match=r"missing/index\.json: synthetic-multilabel index .* not found"):
        load_dataset("synthetic-multilabel", tmp_path / "missing", "train")
    (tmp_path / "index.json").write_text(good)
    (tmp_path / "train" / "images" / "000001.png").unlink()
    ds = load_dataset("synthetic-multilabel", tmp_path, "train")
    assert ds[0]["image"].shape == (3, 32, 32)
    with pytest.raises(DataError, match=r"train/images/000001\.png: image file not found"):
        ds[1]


def test_cli_synth_writes_loadable_datasets(tmp_path, capsys):
    code = cli_main(["data", "synth", "--out", str(tmp_path), "--size", "32", "--n-train", "8", "--n-val", "4",
                     "--n-test", "4", "--seed", "2"])
    assert code == 0 and "synthetic-multilabel: train 8" in capsys.readouterr().out
    for name, k in (("synthetic-birds", 2), ("synthetic-multilabel", 6)):
        ds = load_dataset(name, tmp_path, "val")
        assert len(ds) == 4 and ds.num_classes == k
        batch = collate([ds[i] for i in range(4)])
        assert batch["image"].shape == (4, 3, 32, 32) and batch["group"].shape == (4,)


def test_bird_backgrounds_differ_by_texture_not_colour():
    data = generate("birds", "test", 400, SyntheticConfig(seed=2, difficulty=0.2))
    image, background = data.images.float() / 255, data.masks == 0
    place = torch.from_numpy(data.records.groups % 2)
    blue_minus_green = ((image[:, 2] - image[:, 1]) * background).sum((1, 2)) / background.sum((1, 2))
    gap = (blue_minus_green[place == 1].mean() - blue_minus_green[place == 0].mean()).abs()
    assert gap < 0.25 * blue_minus_green.std()  # the palette does not reveal the place
    grey = image.mean(1)
    dy = ((grey[:, 1:] - grey[:, :-1]).abs() * background[:, 1:] * background[:, :-1]).mean((1, 2))
    dx = ((grey[:, :, 1:] - grey[:, :, :-1]).abs() * background[:, :, 1:] * background[:, :, :-1]).mean((1, 2))
    ratio = dy / dx  # horizontal waves vary along y; blotches in every direction
    assert ratio[place == 1].min() > ratio[place == 0].max()  # the texture does
