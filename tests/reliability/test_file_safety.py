"""Safety of loaded files and of the output directory.

* Checkpoints, training checkpoints and explanation caches are read without executing code: a pickle crafted to run
  code (its ``__reduce__`` writes a marker file) is refused and the marker is never written — while the same file,
  unpickled the unsafe way, does write it (so the payload is live).
* YAML configs and ``key=value`` overrides are parsed safely: ``!!python/...`` tags are refused.
* File names read from annotation files cannot leave the dataset root (``..``, absolute paths, drive letters, NUL).
* The trainer fails before training on a read-only output directory and on a disk too small for the checkpoints it
  can keep; every shipped config starts on a 50 GB disk, and a resume counts the checkpoints already on disk.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from rightreasons import create_model, load_model, load_weights
from rightreasons.config import from_dict, load_config
from rightreasons.data import DataError, load_dataset
from rightreasons.data.synthetic.storage import FORMAT as SYNTHETIC_FORMAT
from rightreasons.data.synthetic.storage import VERSION as SYNTHETIC_VERSION
from rightreasons.distill.cache import FORMAT as CACHE_FORMAT
from rightreasons.distill.cache import VERSION as CACHE_VERSION
from rightreasons.distill.cache import ExplanationCache
from rightreasons.classification import ClassificationConfig, ClassificationTask
from rightreasons.apps.tasks import load_task_config
from rightreasons.engine import Trainer, run
from rightreasons.engine.checkpointing import MANIFEST
from rightreasons.engine.trainer import checkpoint_bytes, checkpoints_kept_at_most, require_checkpoint_space
from rightreasons.errors import CacheError, CheckpointError, ConfigError, TrainingError
from rightreasons.models import read_state_dict


class Payload:
    """Unpickling this object runs ``exec`` on code that writes ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",)


def crafted_checkpoint(path: Path, marker: Path, kind: str) -> Path:
    """A checkpoint file whose unpickling writes ``marker``: a state dict with the payload beside a real tensor, nested
    in a Lightning-style ``state_dict``, in torch's legacy (pre-1.6) format, or as a bare pickle. (A plain torch zip
    file through ``load_weights`` is tested in tests/models/test_weights.py.)"""
    state = {"conv1.linear.weight": torch.zeros(1), "fc.bias": Payload(marker)}
    if kind == "lightning":
        torch.save({"state_dict": state, "epoch": 3}, path)
    elif kind == "legacy":
        torch.save(state, path, _use_new_zipfile_serialization=False)
    else:
        path.write_bytes(pickle.dumps(state, protocol=2))
    return path



LOADERS = {
    "read_state_dict": read_state_dict,
    "load_weights": lambda path: load_weights(create_model("bcos_cifar10_resnet20", num_classes=3), path),
    "create_model": lambda path: create_model("bcos_cifar10_resnet20", checkpoint=path, num_classes=3),
    "load_model": load_model,
}


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("kind", ["lightning", "legacy", "pickle"])
def test_checkpoint_crafted_to_run_code_is_refused(tmp_path, kind, loader):
    marker = tmp_path / "marker"
    path = crafted_checkpoint(tmp_path / "evil.pth", marker, kind)
    refused = rf"{path}: refused to load: the file is not a plain weights file; it asks to call \S+"
    with pytest.raises(CheckpointError, match=refused):
        LOADERS[loader](path)
    assert not marker.exists()
    with path.open("rb") as f:  # the payload is live: unsafe loading runs it
        torch.load(f, weights_only=False) if kind != "pickle" else pickle.load(f)
    assert marker.read_text() == "pwned"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A two-step training run with a checkpoint after every step (the trainer's accelerate checkpoint files);
    single-threaded, which is fastest for this tiny model on a shared 2-core machine."""
    folder = tmp_path_factory.mktemp("run")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run(tiny_config(folder / "run", checkpoint={"every_steps": 1, "keep_last": 1}))
    finally:
        torch.set_num_threads(threads)
    return folder / "run"


def tiny_config(output_dir: Path, **sections) -> ClassificationConfig:
    return from_dict(ClassificationConfig, {"output_dir": str(output_dir), "cpu": True, "seed": 0,
                                            "model": {"name": "bcos_cifar10_resnet20"},
                                            "data": {"image_size": 32, "batch_size": 4, "eval_batch_size": 8,
                                                     "options": {"n": 8, "seed": 1}},
                                            "optim": {"epochs": 1}, "eval": {"num_images": 0}, **sections})


@pytest.mark.parametrize("target", ["optimizer.bin", "scheduler.bin", "random_states_0.pkl"])
def test_training_checkpoint_crafted_to_run_code_is_refused_on_resume(finished_run, tmp_path, target):
    """A replaced file no longer matches the checkpoint's manifest, so resuming refuses the checkpoint before reading
    it. An attacker who also rewrites the manifest meets the second wall: accelerate's files are read with
    ``weights_only=True``, so a crafted optimizer, scheduler or RNG-state file is refused (a ``CheckpointError`` naming
    the checkpoint, wrapping accelerate's ``pickle.UnpicklingError``) and runs nothing. (Accelerate itself skips an
    unreadable RNG-state file with an INFO line; the resume checks each process's file before it.)"""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (checkpoint,) = sorted((run / "checkpoints").glob("step-*"))
    marker = tmp_path / "marker"
    torch.save({"state": Payload(marker)}, checkpoint / target)
    trainer = Trainer(ClassificationTask(tiny_config(run, checkpoint={"every_steps": 1, "keep_last": 1})))
    with pytest.raises(CheckpointError, match=rf"no intact checkpoint .*{target} has \d+ bytes, its record says"):
        trainer.resume()
    manifest = json.loads((checkpoint / MANIFEST).read_text())
    content = (checkpoint / target).read_bytes()
    manifest["files"][target] = {"bytes": len(content), "sha256": hashlib.sha256(content).hexdigest()}
    (checkpoint / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=rf"(?s){checkpoint}.*Unsupported global"):
        trainer.resume()
    assert not marker.exists()


def test_explanation_cache_shard_crafted_to_run_code_is_refused(tmp_path):
    """A cache whose shard is a pickle (with a matching size and checksum in its record) is refused as corrupt: shards
    are read with safetensors only."""
    marker = tmp_path / "marker"
    shard = tmp_path / "cache" / "shard-00000.safetensors"
    shard.parent.mkdir()
    torch.save({"explanations": Payload(marker)}, shard)
    content = shard.read_bytes()
    record = {"file": shard.name, "bytes": len(content), "sha256": hashlib.sha256(content).hexdigest(), "start": 0,
              "stop": 1}
    (shard.parent / "manifest.json").write_text(json.dumps({
        "format": CACHE_FORMAT, "version": CACHE_VERSION, "complete": True, "num_images": 1, "ids_sha256": "",
        "explanation_shape": [1, 8, 8], "num_classes": 2, "teacher": {}, "data": {}, "transform": {}, "explanation": {},
        "shards": [record]}))
    with pytest.raises(CacheError, match=rf"{shard}: unreadable shard"):
        ExplanationCache(shard.parent)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------------------- YAML
TAGS = ["!!python/object/apply:builtins.exec", "!!python/object/new:builtins.exec", "!!python/name:builtins.exec",
        "!!python/module:os", "!!python/object:rightreasons.engine.TrainConfig"]


@pytest.mark.parametrize("where", ["file", "override"])
@pytest.mark.parametrize("tag", TAGS)
def test_yaml_python_tags_are_refused(tmp_path, tag, where):
    marker = tmp_path / "marker"
    value = f"{tag} [\"open({str(marker)!r}, 'w').write('pwned')\"]"
    if where == "file":
        path = tmp_path / "evil.yaml"
        path.write_text(f"output_dir: {value}\n")
        with pytest.raises(ConfigError, match=rf"{path}: not valid YAML: .*could not determine a constructor"):
            load_config(ClassificationConfig, path)
    else:
        with pytest.raises(ConfigError, match=r"override 'output_dir=.*': value is not a valid YAML scalar"):
            load_config(ClassificationConfig, None, [f"output_dir={value}"])
    assert not marker.exists()
    if tag == TAGS[0]:  # the document is live: an unsafe loader runs it
        yaml.unsafe_load(value)
        assert marker.read_text() == "pwned"


# ---------------------------------------------------------------------------------------------------------- paths
ESCAPING = ["../outside.png", "images/../../outside.png", "{outside}", "C:\\outside.png", "..\\outside.png",
            "a\x00b.png"]


def image(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((24, 32, 3), 90, np.uint8)).save(path)
    return path


def voc_layout(root: Path, image_id: str) -> tuple[Path, str]:
    for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    split = root / "ImageSets/Main/train.txt"
    split.write_text(f"000001\n{image_id}\n")
    return split, "line 2"


def coco_layout(root: Path, file_name: str) -> tuple[Path, str]:
    (root / "annotations").mkdir(parents=True)
    (root / "train2014").mkdir()
    path = root / "annotations/instances_train2014.json"
    path.write_text(json.dumps({"images": [{"id": 9, "file_name": file_name, "height": 24, "width": 32}],
                                "annotations": [{"id": 1, "image_id": 9, "category_id": 1, "bbox": [1, 1, 5, 5],
                                                 "iscrowd": 0, "area": 25}],
                                "categories": [{"id": 1, "name": "cat"}]}))
    return path, "image 9"


def waterbirds_layout(root: Path, file_name: str) -> tuple[Path, str]:
    root.mkdir(parents=True)
    with (root / "metadata.csv").open("w", newline="") as f:
        csv.writer(f).writerows([["img_filename", "y", "place", "split"], ["ok/a.png", 0, 0, 0], [file_name, 1, 1, 0]])
    with (root / "boxes.csv").open("w", newline="") as f:
        csv.writer(f).writerows([["img_filename", "x1", "y1", "x2", "y2"], ["ok/a.png", 1, 1, 9, 9],
                                 [file_name, 1, 1, 9, 9]])
    return root / "metadata.csv", "line 3"


def synthetic_layout(root: Path, file_name: str, field: str = "image") -> tuple[Path, str]:
    root.mkdir(parents=True)
    record = {"id": "t0", "image": "train/images/000000.png", "mask": "", "labels": [0], "boxes": [],
              "box_labels": [], "points": [], "point_labels": [], "group": 0, field: file_name}
    path = root / "index.json"
    path.write_text(json.dumps({"format": SYNTHETIC_FORMAT, "version": SYNTHETIC_VERSION, "name": "synthetic-birds",
                                "classes": ["landbird", "waterbird"], "config": {}, "splits": {"train": [record]}}))
    return path, r"splits\.train\[0\]"


LAYOUTS = {
    "voc2007": voc_layout,
    "coco2014": coco_layout,
    "waterbirds100": waterbirds_layout,
    "synthetic-birds": synthetic_layout,
    "synthetic-birds mask": lambda root, name: synthetic_layout(root, name, "mask"),
}


@pytest.mark.parametrize("name", ESCAPING, ids=["parent", "nested-parent", "absolute", "drive", "backslash", "nul"])
@pytest.mark.parametrize("dataset", sorted(LAYOUTS))
def test_file_names_that_leave_the_dataset_root_are_refused(tmp_path, dataset, name):
    outside = image(tmp_path / "outside.png")  # a real file the name would reach
    name = name.format(outside=outside)
    root = tmp_path / "data"
    annotation, record = LAYOUTS[dataset](root, name)
    message = rf"{annotation}: {record}: file name .* (escapes the dataset root|contains a NUL byte)"
    with pytest.raises(DataError, match=message):
        load_dataset(dataset.split()[0], root, "train")


@pytest.mark.parametrize("dataset", ["coco2014", "waterbirds100"])
def test_nested_and_dotted_file_names_inside_the_root_are_read(tmp_path, dataset):
    """The check refuses only what leaves the root: sub-folders and names with dots load normally."""
    root = tmp_path / "data"
    name = "sub.dir/x..y/..bird.png"
    LAYOUTS[dataset](root, name)
    folder = root / "train2014" if dataset == "coco2014" else root
    image(folder / name)
    image(folder / "ok/a.png")
    samples = load_dataset(dataset, root, "train")
    assert samples[len(samples) - 1]["image"].shape == (3, 24, 32)


# ---------------------------------------------------------------------------------------------------------- outputs
def test_read_only_output_directory_fails_before_training(tmp_path, monkeypatch):
    """A read-only output directory is refused before any data or model is built. Where the tests run as root,
    ``chmod`` does not stop writes, so the kernel's answer for a read-only directory is simulated by making
    ``os.access`` report no write permission for it."""
    out = tmp_path / "run"
    out.mkdir()
    out.chmod(0o555)
    if os.geteuid() == 0:
        real_access = os.access
        monkeypatch.setattr(os, "access",
                            lambda path, mode: False if Path(path) == out else real_access(path, mode))
    try:
        with pytest.raises(TrainingError, match=rf"output directory {out} is not writable"):
            Trainer(ClassificationTask(tiny_config(out)))
    finally:
        out.chmod(0o755)
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("optim, slots", [({"name": "adam"}, 2), ({"name": "sgd", "momentum": 0.0}, 0)],
                         ids=["adam", "sgd-without-momentum"])
@pytest.mark.parametrize("keep_front, front", [(None, 2), (0, 0)], ids=["front-unbounded", "no-front"])
def test_disk_too_small_for_the_checkpoints_fails_before_training(tmp_path, monkeypatch, optim, slots, keep_front,
                                                                   front):
    """Free space (monkeypatched ``shutil.disk_usage``) below (weights + optimiser state) × the checkpoints that can
    exist at once: keep_last (3) + the best one + the Pareto front's (one per validation of this one-epoch run, two,
    unless ``keep_front`` bounds it) + the one being written."""
    model = create_model("bcos_cifar10_resnet20", num_classes=2)
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    per_checkpoint = weights + slots * sum(p.numel() * p.element_size() for p in model.parameters())
    needed = per_checkpoint * (3 + 1 + front + 1)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=needed - 1))
    config = tiny_config(tmp_path / "run", optim={"epochs": 1, **optim},
                         checkpoint={"keep_last": 3, "keep_front": keep_front})
    with pytest.raises(TrainingError, match=rf"a checkpoint takes about {per_checkpoint:,} bytes .* up to "
                                            rf"{3 + 1 + front + 1} of them .*keep_last = 3, the best one, up to {front} "
                                            rf"on the Pareto front .* {needed:,} bytes in all, but only {needed - 1:,} "
                                            "bytes are free"):
        Trainer(ClassificationTask(config))
    assert not (tmp_path / "run" / "checkpoints").exists()
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=needed))
    assert Trainer(ClassificationTask(config)).checkpoints.latest() is None


def _meta_model(config) -> torch.nn.Module:
    """The config's model, without memory or weights (sizes only): 1,000 classes, as many as any shipped dataset."""
    with torch.device("meta"):
        return create_model(config.model.name, num_classes=1000, **config.model.kwargs)


SHIPPED = sorted(p for p in (Path(__file__).parents[2] / "configs").rglob("*.yaml")
                 if not {"grids", "studies"} & set(p.parts))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_shipped_config_starts_on_an_ordinary_disk(path, tmp_path, monkeypatch):
    """50 GB free hold every checkpoint a shipped run can keep at once; a disk of two checkpoints is refused. Before:
    ``voc2007_baseline.yaml`` reserved 304 checkpoints (85.9 GB) and the Waterbirds configs 354 — a Pareto-front
    checkpoint per validation when ``keep_front`` was unset."""
    config = load_task_config(None, path)
    model = _meta_model(config)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda where: usage._replace(free=50 * 10 ** 9))
    require_checkpoint_space(tmp_path, config, model, config.optim.epochs)
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda where: usage._replace(free=2 * checkpoint_bytes(model, config.optim)))
    with pytest.raises(TrainingError, match="not enough free disk space"):
        require_checkpoint_space(tmp_path, config, model, config.optim.epochs)


def test_after_space_is_freed_resume_reserves_only_new_checkpoints_and_may_lower_keep_last(finished_run, tmp_path,
                                                                                          monkeypatch):
    """A run stopped by a full disk, resumed once space was freed: the checkpoints already on disk are not counted
    again, and the error's advice (lower ``keep_last``) is a change a resume accepts. Before: ``--resume`` was refused
    for the space its own checkpoints took, and lowering ``keep_last`` was refused as a config change."""
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    for name in ("summary.json", "model.safetensors"):
        (out / name).unlink()  # interrupted after its checkpoints
    existing = len(list((out / "checkpoints").glob("step-*")))
    config = tiny_config(out, checkpoint={"every_steps": 1, "keep_last": 2})
    model = create_model("bcos_cifar10_resnet20", num_classes=2)
    copies, _ = checkpoints_kept_at_most(config, 1)
    assert existing >= 1 and copies > existing
    new = checkpoint_bytes(model, config.optim) * (copies - existing)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda where: usage._replace(free=new))
    trainer = Trainer(ClassificationTask(config))
    assert trainer.resume() is True
    trainer.lock.release()
    with pytest.raises(TrainingError, match="not enough free disk space"):  # a fresh run needs them all
        Trainer(ClassificationTask(tiny_config(tmp_path / "fresh", checkpoint={"every_steps": 1, "keep_last": 2})))
