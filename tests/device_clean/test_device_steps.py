"""Every step type of the engine trains on the device of the tier (``conftest.py``): two optimiser steps — losses,
explanations, backward, the skip flags, clipping and the fused optimiser update — with the batch moved as the trainer
moves it and the loader's batch on the host for the host's decisions. A step that does not log reads nothing."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest
import torch

from conftest import move_run, no_host_reads
from rightreasons import create_model, save_model
from rightreasons.distill import DistillConfig, write_teacher_cache
from rightreasons.engine import Trainer

def _step_counts():
    """``scripts/step_counts.py``: the tiny run of every step type of the engine (``STEP_TYPES``, ``_config``)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "step_counts.py"
    spec = importlib.util.spec_from_file_location("step_counts", script)
    module = sys.modules["step_counts"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


step_types = _step_counts()


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Where the runs live, with the first-stage model JTT's second stage reads."""
    folder = tmp_path_factory.mktemp("device-steps")
    save_model(create_model("bcos_resnet18", num_classes=2, inplanes=8), folder / "first_stage.safetensors")
    return folder


@pytest.mark.parametrize("name", list(step_types.STEP_TYPES))
def test_every_step_type_trains_on_the_device(folder, device, name):
    kind, config = step_types._config(*step_types.STEP_TYPES[name], folder, name)
    if isinstance(config, DistillConfig) and config.distill.frozen and not Path(config.distill.frozen).exists():
        write_teacher_cache(config, config.distill.frozen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = move_run(Trainer(kind(config)), device)
    try:
        batches = iter(trainer.loader)
        trainer.train_step(next(batches))  # the optimiser makes its state
        first = next(batches)
        with no_host_reads(device):
            stats = trainer.train_step(first)
        assert trainer.guard.pending == 2
        assert all(v.device.type == device.type for v in stats.values())
        assert all(p.device.type == device.type for p in trainer.bare_model.parameters())
        if device.type != "meta":  # a logged step reads, once
            assert torch.isfinite(torch.tensor(list(trainer.read_steps().values()))).all()
    finally:
        trainer.lock.release()
