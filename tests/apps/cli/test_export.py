"""``rightreasons export``: a tiny training run becomes a model directory that ``evaluate`` and ``explain`` take, with
a model card holding the run's numbers and the explanations of two test images, uploaded by ``--push-to-hub`` (to a
fake ``huggingface_hub``); an occupied ``--out`` or a malformed repository id is refused with one ``error:`` line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from PIL import Image
from safetensors import safe_open

from cli_outcomes import clear_error
from fake_hub import install_fake_hub
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


def test_train_export_evaluate_explain(finished_run, run_cli, tmp_path, monkeypatch):
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
    pictures = ["explanation-1.png", "explanation-2.png"]
    assert sorted(p.name for p in out.glob("*.png")) == pictures
    assert all(f"![explanation {i}]({name})" in card for i, name in enumerate(pictures, 1))
    assert Image.open(out / pictures[0]).size[0] > 3 * 32  # the three panels of save_explanation

    done = run_cli("evaluate", "--checkpoint", out)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["image_size"] == 32 and results["split"] == "test" and 0 <= results["accuracy"] <= 1

    Image.fromarray(np.zeros((48, 40, 3), dtype=np.uint8)).save(tmp_path / "bird.png")
    done = run_cli("explain", "--checkpoint", out, "--out", tmp_path / "explained", "--device", "cpu",
                   tmp_path / "bird.png")
    assert done.returncode == 0, done.stderr
    assert Image.open(tmp_path / "explained" / "bird_explanation.png").size == (32, 32)

    calls = install_fake_hub(monkeypatch)
    shutil.rmtree(finished_run / "wb")  # the test split is gone: an export without figures, which replaces them
    done = run_cli("export", run, "--out", out, "--push-to-hub", "someone/tiny")
    assert done.returncode == 0, done.stderr
    assert "the model card shows no explanation figures: split 'test' of waterbirds100 cannot be read" in done.stderr
    assert not list(out.glob("*.png")) and "## Explanations" not in (out / "README.md").read_text()
    assert done.stdout.splitlines() == [str(out), "https://huggingface.co/someone/tiny/commit/0123abc"]
    assert [(name, kwargs.get("folder_path")) for name, _, kwargs in calls] == [("create_repo", None),
                                                                                ("upload_folder", str(out))]


def test_an_occupied_output_directory_is_refused(run_cli, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    clear_error(run_cli("export", tmp_path / "run", "--out", tmp_path),
                r"--out .* is a non-empty directory that is not an earlier export")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_malformed_repository_id_is_refused_before_any_work(run_cli, tmp_path):
    clear_error(run_cli("export", tmp_path / "run", "--out", tmp_path / "out", "--push-to-hub", "tiny"),
                r"--push-to-hub 'tiny': expected a Hub repository id OWNER/NAME")
    assert not (tmp_path / "out").exists()
