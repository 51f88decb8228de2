"""``rightreasons export``: a tiny training run becomes a model directory that ``evaluate`` and ``explain`` take, with
a model card holding the run's numbers; an occupied ``--out`` is refused with one ``error:`` line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from safetensors import safe_open

from cli_outcomes import clear_error
from run_configs import TINY_WATERBIRDS_ROWS

CONFIG = """\
output_dir: run
cpu: true
model: {name: bcos_resnet18, kwargs: {inplanes: 4}}
data: {name: waterbirds100, root: ROOT, image_size: 32, batch_size: 4, eval_batch_size: 8}
optim: {epochs: 1, lr: 0.01}
eval: {num_images: 0}
checkpoint: {keep_last: 1}
"""


@pytest.fixture
def finished_run(tmp_path, write_waterbirds, run_cli):
    """A tiny Waterbirds-100 run at 32 px (two steps of a width-4 B-cos ResNet-18)."""
    data = write_waterbirds(tmp_path / "wb", TINY_WATERBIRDS_ROWS)
    (tmp_path / "config.yaml").write_text(CONFIG.replace("ROOT", str(data)))
    assert run_cli("train", "--config", "config.yaml", cwd=tmp_path).returncode == 0
    return tmp_path


def test_train_export_evaluate_explain(finished_run, run_cli, tmp_path):
    run = finished_run / "run"
    with safe_open(str(run / "model.safetensors"), "pt") as f:  # the trainer records the input it validated on
        assert json.loads(f.metadata()["rightreasons_input"])["input_size"] == [6, 32, 32]
    out = finished_run / "export"
    done = run_cli("export", run, "--out", out)
    assert done.returncode == 0, done.stderr
    card = (out / "README.md").read_text()
    summary = json.loads((run / "summary.json").read_text())
    accuracy = summary["history"][-1]["accuracy"]
    assert "datasets:\n- waterbirds100\n" in card and f"| {accuracy:.4f} |" in card and "- seed: 0" in card
    assert json.loads((out / "config.json").read_text())["training"]["task"] == "train"

    done = run_cli("evaluate", "--checkpoint", out)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["image_size"] == 32 and results["split"] == "test" and 0 <= results["accuracy"] <= 1

    Image.fromarray(np.zeros((48, 40, 3), dtype=np.uint8)).save(tmp_path / "bird.png")
    done = run_cli("explain", "--checkpoint", out, "--out", tmp_path / "explained", "--device", "cpu",
                   tmp_path / "bird.png")
    assert done.returncode == 0, done.stderr
    assert Image.open(tmp_path / "explained" / "bird_explanation.png").size == (32, 32)

    assert run_cli("export", run, "--out", out).returncode == 0  # an earlier export is replaced


def test_an_occupied_output_directory_is_refused(run_cli, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    clear_error(run_cli("export", tmp_path / "run", "--out", tmp_path),
                r"--out .* is a non-empty directory that is not an earlier export")
    assert (tmp_path / "notes.txt").read_text() == "mine"
