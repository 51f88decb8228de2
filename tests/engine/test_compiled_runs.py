"""``compile``: a guided run of a compiled B-cos model through the real command line (the model compiled, its guided
steps compiled whole), whose checkpoints and model file are those of the bare model, so every later command takes
them; guided and e²KD steps through the engine train as the eager ones do, compile once whatever images a batch
annotates, and wait for nothing."""

from __future__ import annotations

import json

import pytest
import torch._dynamo
import yaml
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from rightreasons.config import from_dict
from rightreasons.distill import DistillationTask, DistillConfig
from rightreasons.engine import Trainer
from rightreasons.engine.counting import count_step
from rightreasons.guidance import GuidanceTask, GuideConfig
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
    assert guided and all(r["localization"] > 0 for r in guided)  # the compiled explanations reached the loss
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


def _distill_config(**changes):
    """The tiny run as live e²KD from a B-cos teacher of the data's two classes."""
    config = tiny_guided_config(**changes)
    del config["guidance"]
    return {**config, "teacher": {"name": "bcos_resnet18", "kwargs": {"inplanes": 4, "num_classes": 2}},
            "distill": {"explanation_weight": 1.0}}


STEP_TYPES = {"guided": (GuidanceTask, GuideConfig, tiny_guided_config),
              "e2kd": (DistillationTask, DistillConfig, _distill_config)}


@pytest.mark.parametrize("kind", list(STEP_TYPES))
def test_compiled_steps_train_as_eager_ones_compile_once_and_wait_for_nothing(tmp_path, kind):
    """Two steps of the engine, eager and compiled (``aot_eager``): the same losses within float32 tolerance; the
    second batch annotates other images and compiles nothing new; a third step that does not log makes no host
    sync."""
    task, config_class, config = STEP_TYPES[kind]
    torch._dynamo.reset()
    losses, graphs = {}, []
    for mode in ("no", "aot_eager"):
        trainer = Trainer(task(from_dict(config_class, config(compile=mode, output_dir=str(tmp_path / mode),
                                                              **{"data.options": {"n": 12, "size": 32}}))))
        try:
            batches = list(trainer.loader)
            losses[mode] = []
            for batch in batches[:2]:
                compiled = torch._dynamo.utils.counters["stats"]["unique_graphs"]
                losses[mode].append({k: v.item() for k, v in trainer.train_step(batch).items()})
                graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"] - compiled)
            if mode != "no":
                assert not count_step(trainer, batches[2]).syncs
        finally:
            trainer.lock.release()
    if kind == "guided":  # each batch annotates some images, not the same
        annotated = [batch["has_boxes"].tolist() for batch in batches]
        assert all(any(a) for a in annotated) and annotated[0] != annotated[1]
    assert graphs == [0, 0, 1, 0]  # eager: none; compiled: the step once
    for compiled, eager in zip(losses["aot_eager"], losses["no"]):
        assert compiled.keys() == eager.keys()
        for name in eager:
            assert compiled[name] == pytest.approx(eager[name], rel=1e-4, abs=1e-6), name
