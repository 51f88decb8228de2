"""The validation images of a classifier's training (its explanation hook) explain themselves (issue 14, item 9): class
name, probability through the link of the run's loss and its logit in the title, the explained class's boxes drawn; the
exported model file names the classes, so `explain` shows them too."""

from __future__ import annotations

import math

import pytest
import torch

from rightreasons import capabilities, load_model
from rightreasons.apps.cli import main
from rightreasons.data import load_dataset
from rightreasons.classification import hooks

CONFIG = """
model: {name: bcos_cifar10_resnet20}
data: {name: synthetic-birds, image_size: 32, batch_size: 8, eval_batch_size: 16, options: {n: 16, seed: 3}}
optim: {epochs: 1, lr: 0.001}
eval: {num_images: 2}
"""


@pytest.fixture
def drawn(monkeypatch):
    calls = []
    real = hooks.save_explanation

    def keep(path, image6, weights, title=None, *, boxes=None):
        calls.append({"title": title, "boxes": boxes, "image": image6, "weights": weights})
        return real(path, image6, weights, title, boxes=boxes)

    monkeypatch.setattr(hooks, "save_explanation", keep)
    return calls


def test_validation_images_name_the_class_and_draw_its_boxes(tmp_path, drawn):
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "run"
    assert main(["--quiet", "train", "--config", str(config), f"output_dir={out}", "cpu=true"]) == 0
    assert len(drawn) == 2 and len(list((out / "explanations").rglob("*.png"))) == 2
    val = load_dataset("synthetic-birds", None, "val", n=16, seed=3)
    model = load_model(out / "model.safetensors").eval()
    assert model.classes == tuple(val.classes) == capabilities(model).classes  # the export names the classes
    for call in drawn:
        name, _, rest = call["title"].partition(" p=")
        assert name in val.classes
        probability, _, logit = rest.split(" (")[0].partition(", logit ")
        # B-cos on single-label data trains with BCE (loss.classification auto): the sigmoid of the logit
        assert float(probability) == pytest.approx(1 / (1 + math.exp(-float(logit))), abs=1e-3)
        boxes = torch.as_tensor(call["boxes"])
        assert boxes.shape[-1] == 4 and len(boxes) >= 1  # every synthetic image has its bird's box
