"""Distillation runs end to end (tiny: 32-pixel synthetic data, B-cos CIFAR ResNet-20s, a few steps): a 2-process
live e²KD run on CPU (torchrun, gloo), frozen e²KD through the demo function without running the teacher in the
steps, a stale cache refused at start, limited data, the shift analysis and the configs."""

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from rightreasons import create_model, save_model
from rightreasons.bcos import BcosConv2d
from rightreasons.config import from_dict, load_config, to_dict
from rightreasons.distill import CacheMismatchError, few_shot_indices, shift_similarity
from rightreasons.distill.shift import shifted_view
from rightreasons.engine import Trainer
from rightreasons.errors import TrainingError
from rightreasons.distill import DistillationRun, run_distillation
from rightreasons.explain import layer_for
from rightreasons.distill import DistillationTask, DistillConfig
from rightreasons.distill import task as distillation_task
from guards import GUARD_S

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "distill" / "synthetic.yaml"


def finite_rates(metrics, keys):
    for key in keys:
        assert math.isfinite(metrics[key]) and 0.0 <= metrics[key] <= 1.0, (key, metrics[key])


@pytest.fixture(scope="module")
def teacher_file(tmp_path_factory):
    torch.manual_seed(0)
    return save_model(create_model("bcos_cifar10_resnet20", num_classes=2),
                      tmp_path_factory.mktemp("teacher") / "model.safetensors")


def test_two_process_live_e2kd_run_on_cpu(tmp_path, launch):
    result, = launch(["distill", "--config", str(CONFIG), f"output_dir={tmp_path}"], processes=2, timeout=GUARD_S)
    printed = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"best"')]
    assert len(printed) == 1                                  # the main process reports
    checkpoint = tmp_path / "checkpoints" / "step-000004"
    assert (checkpoint / "random_states_1.pkl").is_file()    # and a second process trained with it
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert printed[0]["test"] == summary["test"]
    assert summary["steps"] == 4
    finite_rates(summary["test"], ["accuracy", "agreement", "ood_agreement", "ood_accuracy", "epg"])
    assert -1.0 <= summary["test"]["explanation_similarity"] <= 1.0
    steps = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in steps if r["split"] == "train"]
    assert len(train) == 4 and all(math.isfinite(r["explanation"]) and math.isfinite(r["kd"]) for r in train)
    assert (tmp_path / "model.safetensors").is_file()


def test_frozen_e2kd_run_never_calls_the_teacher_in_a_step(tmp_path, teacher_file, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the live teacher was run during frozen distillation")

    monkeypatch.setattr(distillation_task, "teacher_outputs", refuse)
    result = run_distillation(DistillationRun(
        teacher=str(teacher_file), mode="e2kd_frozen", output_dir=str(tmp_path / "run"), image_size=32,
        batch_size=8, epochs=1, max_steps=3, data_options={"n": 32, "size": 32}, cache_dir=str(tmp_path / "cache"),
        localization=False))
    assert result["steps"] == 3 and Path(result["cache_dir"], "manifest.json").is_file()
    finite_rates(result["test"], ["accuracy", "agreement", "ood_agreement", "id_agreement", "teacher_accuracy"])
    train = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
             if '"train"' in line]
    assert all(math.isfinite(r["explanation"]) for r in train)

    stale = from_dict(DistillConfig, {
        "output_dir": str(tmp_path / "stale"), "cpu": True, "model": {"name": "bcos_cifar10_resnet20"},
        "teacher": {"checkpoint": str(teacher_file)},
        "data": {"name": "synthetic-birds", "image_size": 32, "options": {"n": 32, "size": 32},
                 "crop_scale": [0.5, 1.0]},
        "distill": {"frozen": str(tmp_path / "cache"), "crop_fraction": 0.875}})
    with pytest.raises(CacheMismatchError, match="transform.crop_fraction: 1.0 != 0.875"):
        Trainer(DistillationTask(stale))


def test_data_free_distillation_on_another_dataset(tmp_path, teacher_file):
    # the bird teacher is distilled on images of the multi-label shapes task and evaluated on birds (its task)
    config = from_dict(DistillConfig, {
        "output_dir": str(tmp_path), "cpu": True, "max_steps": 2, "log_every": 1,
        "model": {"name": "bcos_cifar10_resnet20", "kwargs": {"inplanes": 8}},
        "teacher": {"checkpoint": str(teacher_file)},
        "data": {"name": "synthetic-multilabel", "image_size": 32, "batch_size": 8, "options": {"n": 16, "size": 32}},
        "optim": {"epochs": 1}, "eval": {"num_images": 0, "localization": False},
        "distill": {"eval_data": {"name": "synthetic-birds", "split": "val", "options": {"n": 8, "size": 32}},
                    "test_split": "test"}})
    trainer = Trainer(DistillationTask(config))
    assert trainer.train_set.num_classes == 6 and trainer.val_set.num_classes == 2
    assert trainer.task.objective.logit_loss == "kd"          # the teacher's single-label task decides
    summary = trainer.fit()
    finite_rates(summary["test"], ["accuracy", "agreement", "ood_agreement"])
    with pytest.raises(TrainingError, match="teacher's classes"):   # ground truth of another label space
        Trainer(DistillationTask(from_dict(DistillConfig, {**to_dict(config), "output_dir": str(tmp_path / "gt"),
                                                           "distill": {"gt_weight": 1.0}})))


def test_cache_command_writes_and_refuses_another_setting(tmp_path, teacher_file, capsys):
    from rightreasons.apps.cli import main

    args = ["cache", "--teacher", str(teacher_file), "--data", "synthetic-birds", "--image-size", "32",
            "--out", str(tmp_path), "--shard-size", "3", "data.options={n: 8, size: 32}"]
    assert main(args) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["complete"] and manifest["num_shards"] == 3 and manifest["explanation_shape"] == [6, 32, 32]
    assert manifest["provenance"]["teacher_checkpoint"] == str(teacher_file)
    other = list(args)
    other[other.index("--image-size") + 1] = "16"
    assert main(other) == 2
    assert "transform.image_size: 32 != 16" in capsys.readouterr().err


TINY_VIT = {"image_size": 32, "patch_size": 8, "dim": 32, "depth": 2, "heads": 2, "mlp_dim": 64}


@pytest.mark.parametrize("teacher, student, distill, terms", [
    ({"name": "bcos_cifar10_resnet20", "kwargs": {"num_classes": 2}},
     {"name": "bcos_simple_vit_ti_patch16_224", "kwargs": TINY_VIT}, {}, {"kd", "explanation"}),
    ({"name": "resnet18", "kwargs": {"num_classes": 2}}, {"name": "resnet18"},
     {"gt_weight": 1.0, "at_weight": 1000.0}, {"kd", "explanation", "classification", "attention"}),
    ({"name": "bcos_cifar10_resnet20", "kwargs": {"num_classes": 2}}, {"name": "resnet18"},
     {"explanation": "gradcam"}, {"kd", "explanation"}),
], ids=["bcos-cnn-to-bcos-vit", "standard-to-standard-at", "bcos-to-standard-gradcam"])
def test_any_pairing_of_families_trains(tmp_path, teacher, student, distill, terms):
    config = from_dict(DistillConfig, {
        "output_dir": str(tmp_path), "cpu": True, "max_steps": 2, "log_every": 1, "model": student,
        "teacher": teacher, "optim": {"epochs": 1, "agc": None, "max_grad_norm": 1.0},
        "data": {"name": "synthetic-birds", "image_size": 32, "batch_size": 4, "options": {"n": 8, "size": 32}},
        "eval": {"num_images": 0, "localization": False}, "distill": {"explanation_weight": 1.0, **distill}})
    summary = Trainer(DistillationTask(config)).fit()
    train = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
             if '"train"' in line]
    assert len(train) == 2 and all(terms <= set(r) and all(math.isfinite(r[t]) for t in terms) for r in train)
    finite_rates(summary["history"][-1], ["accuracy", "agreement", "teacher_accuracy"])


def test_few_shot_subset_is_seeded_and_exact_per_class():
    labels = torch.nn.functional.one_hot(torch.arange(40) % 4, 4).float()
    chosen = few_shot_indices(labels, 3, seed=5)
    assert labels[chosen].sum(0).tolist() == [3, 3, 3, 3]
    assert chosen == few_shot_indices(labels, 3, seed=5) != few_shot_indices(labels, 3, seed=6)
    assert few_shot_indices(labels.bool(), 3, seed=5) == chosen  # a dataset's positive_labels (bool) draw the same
    with pytest.raises(ValueError, match="classes \\[0, 1, 2, 3\\] have only"):
        few_shot_indices(labels, 11)


class Patchify(nn.Module):
    """A B-cos conv with kernel = stride = ``patch`` and mean pooling: explanations repeat with period ``patch``."""

    def __init__(self, patch):
        super().__init__()
        self.conv = BcosConv2d(6, 3, patch, stride=patch)

    def forward(self, x):
        return self.conv(x).mean((2, 3))


def test_shift_similarity_shows_the_patch_period():
    torch.manual_seed(1)
    rgb = torch.rand(2, 3, 20, 20)
    canvas = torch.cat([rgb, 1 - rgb], 1)
    assert torch.equal(shifted_view(canvas, 16, 3)[..., 3:, 3:], shifted_view(canvas, 16, 0)[..., :13, :13])
    method = "bcos_weights"  # W(x), defined at the input
    pointwise = shift_similarity(Patchify(1), [canvas], 16, range(5), method, layer_for(method, "final"))
    torch.testing.assert_close(pointwise, torch.ones(5))
    patches = shift_similarity(Patchify(2), [canvas], 16, range(5), method, layer_for(method, "final"))
    torch.testing.assert_close(patches[::2], torch.ones(3))
    assert (patches[1::2] < 0.999).all()


def test_analyze_shift_command_writes_curves_and_plot(tmp_path, teacher_file):
    from rightreasons.apps.cli import main

    code = main(["analyze", "shift", "--model", f"teacher={teacher_file}", "--data", "synthetic-birds",
                 "--option", "n=4", "--option", "size=40", "--image-size", "32", "--max-shift", "3",
                 "--num-images", "4", "--out", str(tmp_path)])
    assert code == 0
    result = json.loads((tmp_path / "shift.json").read_text())
    assert result["shifts"] == [0, 1, 2, 3] and result["images"] == 4
    assert result["curves"]["teacher"][0] == pytest.approx(1.0, abs=1e-5)
    assert (tmp_path / "shift.png").stat().st_size > 0


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "distill").glob("*.yaml")), ids=lambda p: p.name)
def test_distill_configs_are_valid(path):
    config = load_config(DistillConfig, path)
    assert config.teacher.name or config.teacher.checkpoint
