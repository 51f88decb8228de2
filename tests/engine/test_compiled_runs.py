"""``compile``: a guided run of a compiled B-cos model through the real command line (validation compiled, guided
steps eager), whose checkpoints and model file are those of the bare model, so every later command takes them."""

from __future__ import annotations

import json

import pytest
import yaml
from safetensors import safe_open

CONFIG = {"seed": 0, "cpu": True, "log_every": 1, "compile": "aot_eager",
          "model": {"name": "bcos_resnet18", "kwargs": {"inplanes": 4}},
          "data": {"name": "synthetic-birds", "image_size": 32, "batch_size": 4, "eval_batch_size": 8,
                   "annotated_fraction": 0.5, "options": {"n": 8, "size": 32}},
          "optim": {"name": "adam", "lr": 1e-3, "epochs": 1},
          "guidance": {"weight": 1.0},
          "eval": {"num_images": 0},
          "checkpoint": {"every_steps": 1}}


@pytest.fixture
def rightreasons(run_cli):
    """``rightreasons(*args, cwd)``: the command, which must succeed."""
    def run(*args: str, cwd):
        done = run_cli(*args, cwd=cwd)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    return run


def test_a_compiled_guided_run_writes_artefacts_of_the_bare_model(tmp_path, rightreasons):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    rightreasons("guide", "--config", "config.yaml", "output_dir=run", cwd=tmp_path)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["config"]["compile"] == "aot_eager" and summary["steps"] == 2
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    guided = [r for r in records if r["split"] == "train"]
    assert guided and all(r["localization"] > 0 for r in guided)  # the eager explanations reached the loss
    for weights in (tmp_path / "run" / "model.safetensors", tmp_path / "run/checkpoints/step-000002/model.safetensors"):
        with safe_open(weights, "pt") as f:
            assert not [k for k in f.keys() if "_orig_mod" in k], weights
    rightreasons("evaluate", "--checkpoint", "run/checkpoints/step-000002", "--out", "step2.json", "eval.num_images=0",
                 cwd=tmp_path)  # the checkpoint loads into the bare model
    scored = json.loads((tmp_path / "step2.json").read_text())
    assert scored["images"] == 8 and 0 <= scored["accuracy"] <= 1
