"""Every metric a command writes is finite JSON, or the command fails clearly (issue 22): ``evaluate`` and ``explain``
of a model whose outputs are NaN exit with one ``error:`` line naming the model file and what was not finite, and
write nothing; before, ``evaluate`` wrote ``"accuracy": 0.5, "epg": NaN`` (invalid JSON) and ``explain`` printed
``p=nan``, both with exit code 0.

Through the real command line (its entry point, in the test's process: ``run_cli``) on the in-memory synthetic birds
at 32 px and a B-cos ResNet-18 of width 8."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from rightreasons import create_model, save_model

CONFIG = """\
output_dir: run
cpu: true
model: {name: bcos_resnet18, kwargs: {inplanes: 8}}
data: {name: synthetic-birds, image_size: 32, batch_size: 4, eval_batch_size: 4, options: {n: 4, size: 32}}
"""


@pytest.fixture
def nan_model(tmp_path) -> Path:
    """A B-cos ResNet-18 (width 8, two classes) whose weights are all NaN, saved as ``nan.safetensors``."""
    model = create_model("bcos_resnet18", inplanes=8, num_classes=2)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
    return save_model(model, tmp_path / "nan.safetensors")


def test_evaluate_of_a_model_with_nan_outputs_fails_naming_the_model_file(tmp_path, nan_model, run_cli):
    (tmp_path / "config.yaml").write_text(CONFIG)
    done = run_cli("evaluate", "--checkpoint", str(nan_model), "--config", "config.yaml", "--out", "test.json",
                        cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "error:" in line]
    assert str(nan_model) in line and "not finite" in line, line
    assert not (tmp_path / "test.json").exists() and "NaN" not in done.stdout


def test_explain_of_a_model_with_nan_outputs_fails_naming_the_model_file(tmp_path, nan_model, run_cli):
    image = tmp_path / "bird.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(image)
    done = run_cli("explain", "--checkpoint", str(nan_model), "--size", "32", "--out", "out", "--device", "cpu",
                        str(image), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "error:" in line]
    assert str(nan_model) in line and "not finite" in line and "bird.png" in line, line
    assert "p=nan" not in done.stdout and not list((tmp_path / "out").glob("*.png"))


def test_evaluate_writes_finite_json(tmp_path, run_cli):
    """The same command on a finite model: exit 0 and a file that strict JSON parsers read."""
    model = create_model("bcos_resnet18", inplanes=8, num_classes=2)
    path = save_model(model, tmp_path / "model.safetensors")
    (tmp_path / "config.yaml").write_text(CONFIG)
    done = run_cli("evaluate", "--checkpoint", str(path), "--config", "config.yaml", "--out", "test.json",
                        cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    def refuse(constant: str) -> None:
        raise AssertionError(f"non-finite constant {constant} in test.json")

    results = json.loads((tmp_path / "test.json").read_text(), parse_constant=refuse)
    assert results["images"] == 4 and 0 <= results["accuracy"] <= 1 and 0 <= results["epg"] <= 1
