"""``rightreasons analyze shift`` with the arguments of the e²KD guide (``docs/guide/distillation.md``; issue 14: it
ran at 224 px on models trained at 64 px, 12.5 minutes without a word): the input size comes from the model files,
and each model's start is logged."""

import json
import logging

import pytest

import rightreasons
from rightreasons.apps.cli import main
from rightreasons.config import from_dict, to_dict
from rightreasons.classification import ClassificationConfig


def _model_file(path, image_size):
    """A model file as training writes it: the model and, in its metadata, the run's config."""
    config = from_dict(ClassificationConfig, {"data": {"name": "synthetic-birds", "image_size": image_size}})
    model = rightreasons.create_model("bcos_resnet18", num_classes=2, inplanes=4)
    rightreasons.save_model(model, path, metadata={"config": json.dumps(to_dict(config))})
    return path


def test_the_input_size_is_the_one_the_models_were_trained_at(tmp_path, caplog, capsys):
    caplog.set_level(logging.INFO, logger="rightreasons")
    teacher, student = _model_file(tmp_path / "t.safetensors", 24), _model_file(tmp_path / "s.safetensors", 24)
    common = ["--data", "synthetic-birds", "--option", "n=2", "--option", "size=32", "--max-shift", "2",
              "--num-images", "2"]
    assert main(["analyze", "shift", "--model", f"teacher={teacher}", "--model", f"student={student}", *common,
                 "--out", str(tmp_path / "out")]) == 0
    result = json.loads((tmp_path / "out" / "shift.json").read_text())
    assert result["image_size"] == 24 and result["shifts"] == [0, 1, 2]
    assert set(result["curves"]) == {"teacher", "student"}
    started = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[")]
    assert started == ["[1/2] teacher: bcos_weights explanations of 2 images at 24 px, shifted by 0 … 2 px",
                       "[2/2] student: bcos_weights explanations of 2 images at 24 px, shifted by 0 … 2 px"]
    # models trained at different sizes: the user chooses
    other = _model_file(tmp_path / "o.safetensors", 32)
    assert main(["analyze", "shift", "--model", str(teacher), "--model", str(other), *common,
                 "--out", str(tmp_path / "mixed")]) == 2
    error = capsys.readouterr().err
    assert f"{teacher} at 24 px, {other} at 32 px" in error and "choose one with --image-size" in error
    assert main(["analyze", "shift", "--model", str(teacher), "--model", str(other), *common, "--image-size", "16",
                 "--out", str(tmp_path / "mixed")]) == 0
    assert json.loads((tmp_path / "mixed" / "shift.json").read_text())["image_size"] == 16


@pytest.mark.parametrize("explanation", ["none", "saliency"])
def test_an_explanation_that_cannot_be_compared_is_refused_before_any_work(explanation, tmp_path, capsys):
    """`--explanation` is checked when the command runs (its parser offers no list, so that `--help` needs no
    torch): `none` (distil logits only) and unknown names end in one error line naming the choices."""
    assert main(["analyze", "shift", "--model", str(tmp_path / "missing.safetensors"), "--data", "synthetic-birds",
                 "--explanation", explanation, "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"rightreasons analyze: error: --explanation {explanation!r}: expected one of auto, ")
    assert "bcos_weights" in error and "gradcam" in error and "none" not in error.split("expected")[1]
    assert not (tmp_path / "out").exists()
