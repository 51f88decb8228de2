"""``rightreasons robust`` end to end on tiny synthetic-birds runs (every objective, JTT's two stages), GroupDRO's
weights carried across a resumption, JTT's error set and up-weighting, and the refusals of bad settings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rightreasons.apps.cli import main
from rightreasons.config import from_dict
from rightreasons.data import load_dataset
from rightreasons.data.transforms import transforms_for
from rightreasons.engine import Step
from rightreasons.errors import ConfigError
from rightreasons.models import load_model
from rightreasons.robustness import RobustConfig, RobustTask, error_set

CONFIG = """
model: {name: bcos_resnet18, kwargs: {inplanes: 4}}
data: {name: synthetic-birds, image_size: 32, batch_size: 8, eval_batch_size: 16,
       options: {n: 16, seed: 3, correlation: 0.75}}
optim: {epochs: 1, lr: 0.001}
eval: {num_images: 0, localization: false}
"""


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("robust") / "config.yaml"
    path.write_text(CONFIG)
    return path


def robust(config: Path, out: Path, *overrides: str, command: str = "robust") -> dict:
    assert main(["--quiet", command, "--config", str(config), f"output_dir={out}", "cpu=true", *overrides]) == 0
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def first_stage(config, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("erm") / "run"
    robust(config, out, command="train")
    return out


@pytest.mark.parametrize("method", ["reweight", "subsample", "groupdro"])
def test_every_group_objective_trains_through_the_cli(config, tmp_path, method):
    summary = robust(config, tmp_path / method, f"robustness.method={method}")
    assert summary["config"]["robustness"]["method"] == method
    records = [json.loads(line) for line in (tmp_path / method / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    if method == "subsample":  # 16 images with group sizes 6, 2, 2, 6: 4 × 2 kept, one batch per epoch
        assert summary["steps"] == 1 and all(set(r) >= {"classification"} for r in train)
    else:  # the objective is logged beside the plain mean loss
        term = {"reweight": "reweighted", "groupdro": "groupdro"}[method]
        assert summary["steps"] == 2 and all(set(r) >= {"classification", term} for r in train)


def test_groupdro_weights_are_checkpointed_and_a_resumed_run_ends_as_an_uninterrupted_one(config, tmp_path):
    full = tmp_path / "full"
    robust(config, full, "robustness.method=groupdro", "robustness.step_size=0.5", "optim.epochs=2",
           "checkpoint.keep_last=2")
    first, last = sorted((full / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    q_first = torch.load(first / "custom_checkpoint_0.pkl", weights_only=True)["q"]
    q_last = torch.load(last / "custom_checkpoint_0.pkl", weights_only=True)["q"]
    assert q_first.sum().item() == pytest.approx(1.0) and not torch.equal(q_first, q_last)
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    (resumed / "summary.json").unlink()
    shutil.rmtree(resumed / "checkpoints" / last.name)
    assert main(["--quiet", "robust", "--config", str(config), f"output_dir={resumed}", "cpu=true",
                 "robustness.method=groupdro", "robustness.step_size=0.5", "optim.epochs=2",
                 "checkpoint.keep_last=2", "--resume"]) == 0
    assert torch.equal(torch.load(resumed / "checkpoints" / last.name / "custom_checkpoint_0.pkl",
                                  weights_only=True)["q"], q_last)
    a, b = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_jtt_error_set_is_what_the_first_stage_misclassifies(first_stage):
    images = load_dataset("synthetic-birds", None, "train", n=16, seed=3, correlation=0.75)
    errors = error_set(first_stage / "model.safetensors", images, image_size=32)
    model = load_model(first_stage / "model.safetensors").eval()
    images.transform = transforms_for(model, 32, crop_fraction=1.0)
    with torch.no_grad():
        expected = {s["id"] for s in images if model(s["image"][None]).argmax(1).item() != s["labels"].argmax().item()}
    assert errors == expected


def test_jtt_second_stage_upweights_the_error_set(config, first_stage, tmp_path):
    summary = robust(config, tmp_path / "jtt", "robustness.method=upweight",
                     f"robustness.error_set_from={first_stage}", "robustness.upweight=5")
    assert summary["config"]["robustness"]["error_set_from"] == str(first_stage)
    task = RobustTask(from_dict(RobustConfig, {"output_dir": str(tmp_path / "x"), "loss": {"classification": "ce"},
                                               "robustness": {"method": "upweight", "upweight": 5.0,
                                                              "error_set_from": str(first_stage)}}))
    task.loss_kind, task.errors = "ce", {"b"}
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    labels = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    batch = {"image": None, "labels": labels, "id": ["a", "b", "c"]}
    terms, total = task.losses(lambda _: logits, batch, Step(torch.Generator(), 1, lambda t: t))
    per_sample = torch.nn.functional.cross_entropy(logits, labels.argmax(1), reduction="none")
    assert total.item() == pytest.approx(((per_sample * torch.tensor([1.0, 5.0, 1.0])).sum() / 7).item())
    assert terms["classification"].item() == pytest.approx(per_sample.mean().item())


def test_bad_settings_are_refused_by_name(config, tmp_path, capsys):
    with pytest.raises(ConfigError, match="error_set_from"):
        from_dict(RobustConfig, {"robustness": {"method": "upweight"}})
    with pytest.raises(ConfigError, match="error_set_from.*only method: upweight"):
        from_dict(RobustConfig, {"robustness": {"method": "reweight", "error_set_from": "runs/erm"}})
    with pytest.raises(ConfigError, match="step_size"):
        from_dict(RobustConfig, {"robustness": {"method": "groupdro", "step_size": 0}})
    assert main(["--quiet", "robust", "--config", str(config), f"output_dir={tmp_path / 'r'}", "cpu=true",
                 "robustness.method=upweight", f"robustness.error_set_from={tmp_path / 'missing'}"]) != 0
    assert "missing" in capsys.readouterr().err
