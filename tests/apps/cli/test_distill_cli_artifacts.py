"""Issue 25: ``rightreasons cache --teacher`` and ``rightreasons analyze shift --model`` take every artefact a run
writes — its directory, its exported model file, one of its checkpoint directories — and the architecture and classes
come from the run; a path that is none of these is one error line naming it.

One tiny run (a B-cos ResNet-18 of width 4, 32 px, one step on the synthetic birds) serves every test: its exported
model is the weights of its only checkpoint, so the three artefacts must give the same teacher and the same curves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rightreasons.apps.cli import main

DISTILL_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "distill" / "synthetic.yaml"
DATA = "{n: 8, size: 32}"
TRAIN_CONFIG = f"""\
cpu: true
max_steps: 1
model: {{name: bcos_resnet18, kwargs: {{inplanes: 4}}}}
data: {{name: synthetic-birds, image_size: 32, batch_size: 4, options: {DATA}}}
eval: {{num_images: 0}}
checkpoint: {{keep_last: 1}}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished run directory: ``model.safetensors``, ``summary.json`` and ``checkpoints/step-000001``."""
    run = tmp_path_factory.mktemp("artifacts") / "guided"
    config = run.parent / "train.yaml"
    config.write_text(TRAIN_CONFIG)
    assert main(["train", "--config", str(config), f"output_dir={run}"]) == 0
    assert (run / "model.safetensors").is_file() and (run / "checkpoints" / "step-000001").is_dir()
    return run


def _artifacts(run: Path) -> dict[str, Path]:
    return {"run": run, "file": run / "model.safetensors", "checkpoint": run / "checkpoints" / "step-000001"}


@pytest.mark.filterwarnings("error::rightreasons.models.weights.LogitBiasWarning")
def test_cache_takes_a_run_its_model_file_or_a_checkpoint_as_teacher(run, tmp_path, capsys):
    """A checkpoint's weights file records no logit bias; the teacher rebuilt from its run has the trained one, and
    loading it must not warn that it may be the releases' (it used to)."""
    teachers = {}
    for label, artifact in _artifacts(run).items():
        out = tmp_path / label
        assert main(["cache", "--config", str(DISTILL_CONFIG), "--teacher", str(artifact), "--out", str(out),
                     f"data.options={DATA}"]) == 0, label
        teachers[label] = json.loads((out / "manifest.json").read_text())["teacher"]
    assert teachers["run"] == teachers["file"]
    assert teachers["checkpoint"]["weights_sha256"] == teachers["run"]["weights_sha256"]
    assert teachers["checkpoint"]["name"] == teachers["run"]["name"] == "bcos_resnet18"
    # rebuilt from the run's config: its arguments, its two classes and, explicit, their logit bias -log(2 - 1) = 0
    assert teachers["checkpoint"]["kwargs"] == {**teachers["run"]["kwargs"], "logit_bias": 0.0}
    assert teachers["run"]["kwargs"]["inplanes"] == 4 and teachers["run"]["kwargs"]["num_classes"] == 2


def test_analyze_shift_takes_a_run_its_model_file_or_a_checkpoint(run, tmp_path):
    models = [f"{label}={artifact}" for label, artifact in _artifacts(run).items()]
    assert main(["analyze", "shift", *(a for m in models for a in ("--model", m)), "--data", "synthetic-birds",
                 "--option", "n=2", "--option", "size=32", "--max-shift", "2", "--num-images", "2",
                 "--out", str(tmp_path / "shift")]) == 0
    result = json.loads((tmp_path / "shift" / "shift.json").read_text())
    assert result["image_size"] == 32  # the run's data.image_size, not the default 224
    curves = result["curves"]
    assert set(curves) == {"run", "file", "checkpoint"}
    assert curves["run"] == curves["file"] == curves["checkpoint"]
    assert curves["run"][0] == pytest.approx(1.0, abs=1e-5)  # no shift: the explanation is compared with itself


@pytest.mark.parametrize("command", ["cache", "shift"])
@pytest.mark.parametrize("kind", ["missing", "empty directory"])
def test_a_path_that_is_no_artefact_is_one_error_line_naming_it(command, kind, tmp_path, capsys):
    path = tmp_path / "runs" / "nothing"
    if kind == "empty directory":
        path.mkdir(parents=True)
    argv = (["cache", "--config", str(DISTILL_CONFIG), "--teacher", str(path), "--out", str(tmp_path / "out")]
            if command == "cache" else
            ["analyze", "shift", "--model", f"teacher={path}", "--data", "synthetic-birds", "--out",
             str(tmp_path / "out")])
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and ": error: " in error and str(path) in error, error
    assert "unknown model" not in error
    expected = "a directory without a model file" if kind == "empty directory" else \
        "no such model file, run directory or checkpoint directory"
    assert expected in error, error
    assert not (tmp_path / "out").exists()


def test_a_config_whose_teacher_is_a_checkpoint_directory_takes_its_runs_architecture(run, tmp_path):
    """``teacher.checkpoint`` in a config (here as overrides) naming a checkpoint, without ``teacher.name``: the
    architecture is the one its run trained, as with ``--teacher``."""
    checkpoint = _artifacts(run)["checkpoint"]
    manifests = {}
    for label, args in {"config": ["teacher.name=null", f"teacher.checkpoint={checkpoint}", "teacher.kwargs={}"],
                        "flag": ["--teacher", str(checkpoint)]}.items():
        out = tmp_path / label
        assert main(["cache", "--config", str(DISTILL_CONFIG), "--out", str(out), f"data.options={DATA}", *args]) == 0
        manifests[label] = json.loads((out / "manifest.json").read_text())["teacher"]
    assert manifests["config"] == manifests["flag"] and manifests["config"]["kwargs"]["inplanes"] == 4
