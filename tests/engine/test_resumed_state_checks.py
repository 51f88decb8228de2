"""A resumed state is checked field by field before anything of it is used.

A checkpoint whose manifest verifies can still hold a state that no run writes: an edited ``trainer_state.json``
(with the manifest written again to match) or an accelerate random state of another shape. Each is refused by
``--resume`` with one ``error:`` line naming the field, its value and what was expected. Before: ``batch: 999`` made
``--resume`` loop forever, deaf to SIGTERM (the skipped loader yields no batch, so the epoch never ends), and a
random state of another shape was skipped by accelerate with an info line, the run going on unseeded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from rightreasons.engine.checkpointing import MANIFEST
from rightreasons.faults import KILL_VARIABLE
from rightreasons.fileio import file_record

from cli_outcomes import clear_error

CONFIG = """
cpu: true
model: {name: bcos_resnet18, kwargs: {inplanes: 4}}
data: {name: synthetic-birds, image_size: 32, batch_size: 4, eval_batch_size: 8, options: {n: 16, size: 32}}
optim: {epochs: 2}
eval: {num_images: 0}
checkpoint: {every_steps: 1}
"""
#: 4 batches per epoch; the checkpoint of step 6 is batch 2 of epoch 2 (epochs completed: 1)
CHECKPOINT = "step-000006"


def _cli(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """``python -m rightreasons ARGS`` in a process of its own (a hang would not stop the test's process)."""
    return subprocess.run([sys.executable, "-m", "rightreasons", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=600)


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory) -> Path:
    """A run killed with SIGKILL right after its checkpoint of step 6."""
    folder = tmp_path_factory.mktemp("killed")
    (folder / "config.yaml").write_text(CONFIG)
    killed = _cli(["train", "--config", "config.yaml", "output_dir=run"], folder,
                  **{KILL_VARIABLE: "checkpoint: renamed into place:6"})
    assert killed.returncode == -9, killed.stderr[-3000:]
    return folder


def _edit(run: Path, change: Any) -> None:
    """Apply ``change(checkpoint directory)`` and write the manifest again, so that the checkpoint verifies."""
    checkpoint = run / "checkpoints" / CHECKPOINT
    change(checkpoint)
    manifest = json.loads((checkpoint / MANIFEST).read_text())
    manifest["files"] = {name: file_record(checkpoint / name) for name in manifest["files"]}
    (checkpoint / MANIFEST).write_text(json.dumps(manifest))


def _set(field: str, value: Any) -> Any:
    def change(checkpoint: Path) -> None:
        path = checkpoint / "trainer_state.json"
        state = json.loads(path.read_text())
        state[field] = value
        path.write_text(json.dumps(state))
    return change


def _random_state(key: str, value: Any) -> Any:
    def change(checkpoint: Path) -> None:
        path = checkpoint / "random_states_0.pkl"
        states = torch.load(path, weights_only=False)
        states[key] = value
        torch.save(states, path)
    return change


CASES = {
    "batch past the epoch": (_set("batch", 999), r"field 'batch' is 999; expected an integer in \[0, 3\]"),
    "negative epoch": (_set("epoch", -1), r"field 'epoch' is -1; expected an integer in \[0, 2\]"),
    "step of another position": (_set("step", 5), r"field 'step' is 5; expected 6 \(epoch 1, batch 2"),
    "step as text": (_set("step", "6"), r"field 'step' is '6'; expected an integer"),
    "bad steps": (_set("bad_steps", 7), r"field 'bad_steps' is 7; expected an integer in \[0, 2\]"),
    "history not a list": (_set("history", {"step": 1}), r"field 'history' is \{'step': 1\}; expected a list"),
    "validation after the step": (_set("history", [{"step": 99, "epoch": 1}]),
                                  r"field 'history\[0\]\.step' is 99; expected an integer in \[1, 6\]"),
    "best after the step": (_set("best", {"step": 99, "score": 0.5, "metric": "accuracy"}),
                            r"field 'best\.step' is 99; expected an integer in \[1, 6\]"),
    "negative metrics bytes": (_set("metrics_bytes", -5), r"field 'metrics_bytes' is -5; expected an integer >= 0"),
    "torch random state": (_random_state("torch_manual_seed", torch.zeros(7, dtype=torch.uint8)),
                           r"random_states_0\.pkl: field 'torch_manual_seed' is a tensor of shape \[7\] "
                           r"\(torch\.uint8\); "
                           r"expected a tensor of shape \[5056\]"),
    "python random state": (_random_state("random_state", (3, (1, 2), None)),
                            r"random_states_0\.pkl: field 'random_state' .*; expected"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_an_edited_resumed_state_is_refused_naming_the_field(killed_run, tmp_path, case):
    change, message = CASES[case]
    shutil.copytree(killed_run, tmp_path, dirs_exist_ok=True)
    _edit(tmp_path / "run", change)
    resumed = _cli(["train", "--config", "config.yaml", "output_dir=run", "--resume"], tmp_path)
    line = clear_error(resumed, message)
    assert CHECKPOINT in line, line
