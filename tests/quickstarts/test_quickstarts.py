"""The quickstarts of the docs site (``docs/quickstarts.md``), walked: for PASCAL VOC 2007, MS COCO 2014 and
Waterbirds-100, every ``rightreasons`` command of the dataset's section and then of its block in the *Distillation*
section runs through the real command line, in order, in one walk, on a tiny format-faithful copy of the dataset's
layout (VOC XML with difficult and truncated objects; COCO instances JSON with a crowd RLE and images without
annotations; Waterbirds' ``metadata.csv`` with the release's columns and CUB bird masks).

The download lines are replaced by the copies (written where the shipped configs look), and the commands get what
keeps them fast: B-cos ResNets of width 4 at 32 px on the CPU for one epoch, a local file instead of the
ImageNet-pretrained weights (``model.pretrained: true`` needs the network), ``--allow-partial`` for the official image
counts, one λ of each sweep and shifts of up to 4 pixels in ``analyze shift``. Everything else — configs referring to
each other's outputs by run directory (the distillation's teacher too), ``evaluate`` reading the run's config and
picking the split, the sweep's subprocess and its Pareto report, the teacher cache and the frozen run — runs as a
researcher runs it."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path

import pytest
import torch

import rightreasons
from rightreasons.apps import sweep
from rightreasons.apps.cli import main
from rightreasons.apps.tasks import load_task_config
from rightreasons.data import GROUP_NAMES, load_dataset
from rightreasons.distill.cache import weights_fingerprint
from rightreasons.models import capabilities, load_model

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = {"voc2007": "### PASCAL VOC 2007", "coco2014": "### MS COCO 2014", "waterbirds100": "### Waterbirds-100"}
DISTILLATION = "### Distillation: the guided run into a B-cos ResNet-18"
TINY = ["cpu=true", "data.image_size=32", "data.batch_size=2", "data.eval_batch_size=4", "data.num_workers=0",
        "optim.epochs=1", "model.kwargs={inplanes: 4}", "eval.num_images=1"]


def bash_blocks(text: str) -> list[str]:
    """The bash blocks of ``text``, in order, continuation lines joined."""
    return [block.replace("\\\n", " ") for block in re.findall(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL)]


def commands(block: str) -> list[list[str]]:
    """The ``rightreasons`` command lines of a bash block, as argv."""
    return [shlex.split(line)[1:] for line in block.splitlines() if line.startswith("rightreasons ")]


def readme_commands(dataset: str) -> list[list[str]]:
    """The ``rightreasons`` commands of the dataset's quickstart (``docs/quickstarts.md``): its guidance chain (the
    first bash block of its section), then the distillation of its guided run (the block of the *Distillation* section
    that uses the dataset's distillation config)."""
    text = (ROOT / "docs" / "quickstarts.md").read_text(encoding="utf-8")
    guidance = bash_blocks(text[text.index(SECTIONS[dataset]):])[0]
    distillation = [block for block in bash_blocks(text[text.index(DISTILLATION):])
                    if f"configs/distill/{dataset}.yaml" in block]
    assert len(distillation) == 1, f"one distillation block for {dataset}"
    return commands(guidance) + commands(distillation[0])


# ------------------------------------------------------------------------------------------- the dataset copies
def voc_copy(data: Path, write_voc) -> dict[str, int]:
    objects = {  # id: (H, W, [(name, xmin, ymin, xmax, ymax, difficult, truncated)]), 1-based inclusive
        "000001": (40, 50, [("dog", 5, 6, 20, 30, 0, 1), ("person", 30, 2, 45, 38, 1, 0)]),
        "000002": (30, 30, [("cat", 1, 1, 30, 30, 0, 1)]),
        "000004": (36, 44, [("car", 10, 10, 20, 20, 0, 0), ("car", 22, 5, 40, 15, 0, 1)]),
        "000005": (40, 40, [("dog", 2, 2, 18, 18, 0, 0), ("cat", 20, 20, 38, 38, 0, 0)]),
        "000003": (36, 44, [("car", 10, 10, 20, 20, 0, 0), ("dog", 2, 2, 8, 8, 1, 0)]),
        "000006": (32, 32, [("person", 4, 4, 28, 30, 0, 1)]),
        "000007": (32, 40, [("cat", 3, 3, 30, 25, 0, 0)]),
        "000008": (40, 30, [("dog", 2, 10, 20, 38, 0, 0), ("car", 15, 1, 29, 12, 0, 1)]),
    }
    splits = {"train": ["000001", "000002", "000004", "000005"], "val": ["000003", "000006"],
              "test": ["000007", "000008"]}
    write_voc(data, objects, {**splits, "trainval": splits["train"] + splits["val"]})
    return {split: len(ids) for split, ids in splits.items()}


def coco_copy(data: Path, write_coco) -> dict[str, int]:
    categories = [{"id": 1, "name": "person", "supercategory": "person"},
                  {"id": 3, "name": "car", "supercategory": "vehicle"},
                  {"id": 18, "name": "dog", "supercategory": "animal"}]
    sizes = {}
    for split, count in (("train", 4), ("val", 2)):
        ids = [100 * (split == "val") + i for i in range(1, count + 2)]  # the last image has no annotation
        images = [{"id": i, "file_name": f"COCO_{split}2014_{i:012d}.jpg", "height": 30, "width": 40} for i in ids]
        annotations = [{"id": 10 * i + k, "image_id": i, "category_id": (1, 3, 18)[(i + k) % 3], "iscrowd": 0,
                        "bbox": [2.0 + 10 * k, 3.0, 12.0, 14.5], "area": 174.0,
                        "segmentation": [[2.0 + 10 * k, 3.0, 14.0 + 10 * k, 3.0, 14.0 + 10 * k, 17.5, 2.0 + 10 * k,
                                          17.5]]}
                       for i in ids[:-1] for k in range(2)]
        annotations.append({"id": 10 * ids[0] + 9, "image_id": ids[0], "category_id": 1, "iscrowd": 1,  # a crowd
                            "bbox": [26.0, 0.0, 14.0, 30.0], "area": 420.0,
                            "segmentation": {"counts": [780, 420], "size": [30, 40]}})
        write_coco(data / "coco", categories, images, annotations, split=split)
        sizes[split] = count
    return sizes


def waterbirds_copy(data: Path, write_waterbirds) -> dict[str, int]:
    rows = [("002.Sparrow/Sparrow_0001.jpg", 0, 0, 0, (2, 2, 20, 16)),        # train: G1 and G4 only
            ("002.Sparrow/Sparrow_0002.jpg", 0, 0, 0, (4, 3, 18, 20)),
            ("001.Albatross/Albatross_0001.jpg", 1, 1, 0, (8, 4, 30, 22)),
            ("001.Albatross/Albatross_0002.jpg", 1, 1, 0, (6, 2, 26, 18)),
            ("002.Sparrow/Sparrow_0003.jpg", 0, 0, 1, (1, 1, 12, 12)),        # val: drawn like train ...
            ("001.Albatross/Albatross_0003.jpg", 1, 1, 1, (4, 4, 20, 20)),
            ("001.Albatross/Albatross_0004.jpg", 1, 0, 1, (5, 5, 15, 15)),    # ... so this G3 image is left out
            *((f"{'001.Albatross/Albatross' if y else '002.Sparrow/Sparrow'}_01{y}{p}.jpg", y, p, 2, (3, 3, 18, 18))
              for y in (0, 1) for p in (0, 1))]                                # test: every group
    write_waterbirds(data / "waterbird_1.0_forest2water2", rows, box_file=False, segmentations=data / "segmentations")
    return {"train": 4, "val": 2, "test": 4}


COPIES = {"voc2007": voc_copy, "coco2014": coco_copy, "waterbirds100": waterbirds_copy}


# ------------------------------------------------------------------------------------------------ the chain
def adapt(argv: list[str], imagenet: Path) -> list[str]:
    """What keeps a quickstart command fast on the copies (see the module docstring); everything else is kept."""
    stand_in = ["model.pretrained=false", f"model.checkpoint={imagenet}"]
    command = argv[0]
    if command == "prepare":
        return argv + (["--allow-partial"] if argv[1] != "waterbirds100" else [])
    if command in ("train", "guide"):
        config = load_task_config(command, argv[argv.index("--config") + 1])
        return argv + TINY + (stand_in if config.model.pretrained else [])
    if command in ("distill", "cache"):  # the student as tiny as the teacher; cache and frozen run on the same data
        return argv + TINY
    if command == "analyze":
        return argv + ["--max-shift", "4"]
    if command == "sweep":
        only = argv.index("--only") + 1
        runs = [run for run in sweep.load_grid(argv[1]) if argv[only] in run.name]
        overrides = TINY + (stand_in if runs[0].config.model.pretrained else [])
        return [*argv[:only], runs[0].name, *argv[only + 1:], *(x for o in overrides for x in ("--set", o))]
    return argv


@pytest.fixture
def imagenet(tmp_path) -> Path:
    """The stand-in for the release's ImageNet weights: a B-cos ResNet-50 of width 4 with 1000 classes, saved as
    the release saves its files (a plain state dict)."""
    path = tmp_path / "imagenet" / "resnet_50-tiny.pth"
    path.parent.mkdir()
    torch.save(rightreasons.create_model("bcos_resnet50", inplanes=4).state_dict(), path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("dataset", [pytest.param(d, marks=pytest.mark.exhaustive) if d != "waterbirds100" else d
                                     for d in SECTIONS])  # the loaders are tested in tests/data: one chain in `make test`
def test_the_readme_quickstart_runs_from_download_to_distilled_student(dataset, tmp_path, monkeypatch, capsys, imagenet,
                                                                        write_voc, write_coco, write_waterbirds):
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "configs").symlink_to(ROOT / "configs")  # the quickstarts' relative paths, unchanged
    monkeypatch.chdir(work)
    writer = {"voc2007": write_voc, "coco2014": write_coco, "waterbirds100": write_waterbirds}[dataset]
    sizes = COPIES[dataset](work / "data", writer)

    commands = readme_commands(dataset)
    assert [c[0] for c in commands] == ["prepare", "train", "guide", "evaluate", "sweep", "distill", "distill", "cache",
                                        "distill", "evaluate"] + (["analyze"] if dataset == "waterbirds100" else [])
    for argv in commands:
        assert main(adapt(argv, imagenet)) == 0, argv
        out = capsys.readouterr().out
        if argv[0] == "prepare":
            assert "== OK" in out

    runs = work / "runs" / dataset
    baseline = json.loads((runs / "baseline" / "summary.json").read_text())
    guided = json.loads((runs / "guided" / "summary.json").read_text())
    # the baseline starts from the (stand-in) ImageNet weights, the guided run from the baseline's run directory
    assert baseline["config"]["model"]["checkpoint"] == str(imagenet)
    assert baseline["task"] == "train" and "guidance" not in baseline["config"]
    if dataset == "waterbirds100":  # guided from the ImageNet weights, as the thesis
        assert guided["config"]["model"]["checkpoint"] == str(imagenet)
    else:
        assert guided["config"]["model"]["checkpoint"] == f"runs/{dataset}/baseline"
    assert guided["task"] == "guide" and {"epg", "iou"} <= guided["history"][-1].keys()
    assert baseline["best"]["metric"] == ("accuracy" if dataset == "waterbirds100" else "f1")

    # evaluate: the run's config from its summary.json, the dataset's test split (COCO 2014: val)
    evaluate = commands[3]
    results = json.loads((work / evaluate[evaluate.index("--out") + 1]).read_text())
    split = "val" if dataset == "coco2014" else "test"
    assert results["config"] == f"runs/{dataset}/guided/summary.json" and results["split"] == split
    assert results["images"] == sizes[split] and {"epg", "iou"} <= results.keys()
    if dataset == "waterbirds100":
        assert results["worst_group"] in GROUP_NAMES and results["score_metric"] == "accuracy"
        assert sum(f"accuracy/{g}" in results for g in GROUP_NAMES) == 4
        boxes = load_dataset("waterbirds100", work / "data" / "waterbird_1.0_forest2water2", "test")
        assert boxes.annotated.all()  # prepare built boxes.csv from the CUB masks
    else:
        assert results["score_metric"] == "f1" and {"f1", "map"} <= results.keys()

    # the sweep trained its run from the same starting point and wrote the Pareto report
    report = work / "runs" / "reports" / dataset
    with (report / "pareto.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert row["on_front"] == "True" and row["representative"] == "True"
    (swept_run,) = [run for run in sweep.load_grid(commands[4][1]) if run.name == row["setting"]]
    swept = json.loads((work / swept_run.output_dir / "summary.json").read_text())["config"]
    assert swept["model"]["checkpoint"] == guided["config"]["model"]["checkpoint"]
    text = (report / "pareto.md").read_text()
    assert row["setting"] in text and (report / "pareto.png").stat().st_size > 0
    # the representative, chosen on validation, scored once on the test split from its checkpoint
    (kept,) = (work / swept_run.output_dir).glob(f"test-{split}-step-*.json")
    assert json.loads(kept.read_text())["split"] == split and "Not scored" not in text
    assert "test score" in text and ("test accuracy/G1 landbird/land" in text) == (dataset == "waterbirds100")
    if dataset == "coco2014":  # selected on a held-out part of train2014, never a training image; val2014 tests
        data = baseline["config"]["data"]
        held, trained = (set(load_dataset("coco2014", data["root"], split, **data["options"]).ids)
                         for split in ("holdout", "train"))
        assert data["val_split"] == "holdout" and held and trained and not held & trained
        assert guided["config"]["data"]["val_split"] == "holdout" and "not held out" not in text

    # distillation: the guided run is the teacher, named by its run directory; its architecture comes from its file
    students = {name: json.loads((runs / name / "summary.json").read_text()) for name in ("e2kd", "kd", "e2kd-frozen")}
    for summary in students.values():
        assert summary["task"] == "distill" and summary["config"]["model"]["name"] == "bcos_resnet18"
        assert summary["config"]["teacher"] == {"name": None, "checkpoint": f"runs/{dataset}/guided", "kwargs": {},
                                                "pretrained": False}
        assert {"agreement", "explanation_similarity"} <= summary["history"][-1].keys()
    assert students["e2kd"]["config"]["distill"]["explanation_weight"] > 0
    assert students["kd"]["config"]["distill"]["explanation_weight"] == 0
    assert students["e2kd-frozen"]["config"]["distill"]["frozen"] == f"runs/{dataset}/teacher-cache"
    manifest = json.loads((runs / "teacher-cache" / "manifest.json").read_text())
    teacher = load_model(runs / "guided" / "model.safetensors")
    classes = capabilities(teacher).num_classes
    assert manifest["teacher"] == {"name": "bcos_resnet50", "kwargs": {"inplanes": 4, "num_classes": classes},
                                   "weights_sha256": weights_fingerprint(teacher)}
    # the e²KD student scored as its teacher was: the same split, images and metrics
    student_evaluate = commands[-2] if dataset == "waterbirds100" else commands[-1]
    student = json.loads((work / student_evaluate[student_evaluate.index("--out") + 1]).read_text())
    assert student["config"] == f"runs/{dataset}/e2kd/summary.json" and student.keys() == results.keys()
    assert (student["split"], student["images"]) == (results["split"], results["images"])
    test = students["e2kd"].get("test")
    if dataset == "coco2014":  # no test annotations: validated and scored on val2014 only
        assert test is None
    else:
        assert test["split"] == "test" and {"agreement", "explanation_similarity"} <= test.keys()
    if dataset == "waterbirds100":
        assert {"ood_accuracy", "ood_agreement"} <= test.keys()
        shift = json.loads((runs / "shift" / "shift.json").read_text())
        assert shift["curves"].keys() == {"teacher", "kd", "e2kd"} and shift["image_size"] == 32
        assert all(curve[0] == pytest.approx(1.0, abs=1e-4) for curve in shift["curves"].values())  # unshifted: itself
