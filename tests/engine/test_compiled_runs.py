"""``compile``: a guided run of a compiled B-cos model through the real command line (validation compiled, guided
steps eager), whose checkpoints and model file are those of the bare model, so every later command takes them."""

from __future__ import annotations

import json

import pytest
import yaml
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from run_configs import tiny_guided_config

CONFIG = tiny_guided_config(compile="aot_eager", **{"data.options": {"n": 8, "size": 32}, "checkpoint.every_steps": 1})


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


def test_runs_in_one_process_each_get_their_own_compile_and_precision(tmp_path, rightreasons):
    """accelerate keeps one process-wide state, fixed by the first Accelerator: a sweep or a script that trains one
    config after another in a process must still train each as configured — a plain run after a compiled bf16 one
    equals the same plain run trained first, bit for bit, and is not refused for its other precision."""
    plain = tiny_guided_config(**{"data.options": {"n": 8, "size": 32}, "optim.epochs": 1})
    for name, config in (("first", plain), ("compiled", {**CONFIG, "mixed_precision": "bf16"}), ("again", plain)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
        rightreasons("guide", "--config", f"{name}.yaml", f"output_dir={name}", cwd=tmp_path)
    first, again = (load_file(tmp_path / name / "model.safetensors") for name in ("first", "again"))
    assert all(torch.equal(first[key], again[key]) for key in first)
