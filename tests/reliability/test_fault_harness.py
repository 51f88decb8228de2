"""A fault-injection harness over the training engine, beyond the listed cases: hypothesis draws where and how a run
fails, and every drawn run must end one of two ways — identical to the uninterrupted reference run (after a
``--resume`` where it stopped), or with the one clear error of its kind — and never leave a checkpoint with
non-finite weights, a partial ``.tmp-`` directory, or no checkpoint where one had been written.

* **Write failures** — any of five exception types (``ENOSPC``, ``EFBIG``, ``EACCES``, safetensors'
  ``SafetensorError``, the ``RuntimeError`` of ``torch.save``'s zip writer) raised at the k-th call of any writer of
  a run (accelerate's checkpoint files, the JSON trainer state and manifest, the metrics and TensorBoard events, the
  exported model, the summary) ends in "could not write ... Nothing was lost ... --resume", and the resume ends
  identical to the reference.
* **Non-finite numbers** — NaN gradients at drawn steps are skipped (steps of the schedule that change no weight),
  or stop the run with a ``DivergenceError`` when three come in a row; an infinite weight after a drawn optimiser step
  stops the run at once, and the resume (without the fault) ends identical to the reference.

Runs in-process on a tiny guided config (2 epochs × 2 steps); the examples are few, so the whole module stays well
under a minute.
"""

from __future__ import annotations

import errno
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import SafetensorError
from safetensors.torch import load_file

from rightreasons.classification import ClassificationTask
from rightreasons.config import from_dict
from rightreasons.engine import checkpointing, run, trainer
from rightreasons.engine.checkpointing import MANIFEST, CheckpointManager, checkpoint_defect
from rightreasons.errors import DivergenceError, TrainingError
from rightreasons.guidance import GuideConfig

EXAMPLES = settings(max_examples=4, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def config(out: Path) -> GuideConfig:
    return from_dict(GuideConfig, {
        "output_dir": str(out), "seed": 0, "cpu": True, "log_every": 1,
        "model": {"name": "bcos_resnet18", "kwargs": {"inplanes": 4}},
        "data": {"name": "synthetic-birds", "image_size": 32, "batch_size": 4, "eval_batch_size": 8,
                 "annotated_fraction": 0.5, "options": {"n": 8, "size": 32}},
        "optim": {"name": "adam", "lr": 1e-3, "epochs": 2}, "guidance": {"weight": 1.0},
        "eval": {"num_images": 0}, "checkpoint": {"keep_last": 1, "every_steps": 1}})


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Outcome(dict):
    """What a run leaves (``run_outcome``), with a short repr for hypothesis' reports."""

    def __repr__(self) -> str:
        return "<outcome of the reference run>"


@pytest.fixture(scope="module")
def reference(tmp_path_factory, run_outcome) -> dict:
    out = tmp_path_factory.mktemp("reference") / "run"
    run(config(out))
    return Outcome(run_outcome(out))


def fresh_dir() -> Path:
    """A new directory per hypothesis example (function-scoped fixtures are shared between examples)."""
    return Path(tempfile.mkdtemp(prefix="fault-harness-")) / "run"


def assert_checkpoints_sound(out: Path) -> None:
    """No partial directory; every checkpoint verifies against its manifest and holds finite weights."""
    root = out / "checkpoints"
    assert not list(root.glob(".tmp-*")), list(root.iterdir())
    for step in root.glob("step-*"):
        assert checkpoint_defect(step) is None, step
        assert all(t.isfinite().all() for t in load_file(step / "model.safetensors").values()), step


# ---------------------------------------------------------------------------------------------------------- writes
def _failures() -> dict[str, Exception]:
    return {"ENOSPC": OSError(errno.ENOSPC, "No space left on device"),
            "EFBIG": OSError(errno.EFBIG, "File too large"),
            "EACCES": PermissionError(errno.EACCES, "Permission denied"),
            "SafetensorError": SafetensorError("Error while serializing: I/O error: No space left on device"),
            "inline_container": RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 96 vs 0")}


WRITERS = {  # name -> (object, attribute): every writer a run calls
    "accelerate checkpoint files": (Accelerator, "save_state"),
    "trainer state and manifest": (checkpointing, "write_json_atomic"),
    "metrics and TensorBoard": (Accelerator, "log"),
    "exported model": (ClassificationTask, "save_model"),
    "summary": (trainer, "json_text"),
}
ONCE = {"exported model", "summary"}  # called once per run


@contextmanager
def failing(monkeypatch: pytest.MonkeyPatch, writer: str, call: int, error: Exception) -> Iterator[list[int]]:
    """Make ``writer`` raise ``error`` at its ``call``-th call; yields the list of calls made."""
    owner, name = WRITERS[writer]
    original, calls = getattr(owner, name), []

    def patched(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise error
        return original(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(owner, name, patched)
        yield calls


@settings(EXAMPLES, max_examples=8)
@given(writer=st.sampled_from(sorted(WRITERS)), failure=st.sampled_from(sorted(_failures())),
       call=st.integers(1, 3))
def test_a_write_failure_anywhere_ends_in_one_message_and_the_resume_ends_identical(monkeypatch, reference,
                                                                                    run_outcome, writer, failure,
                                                                                    call):
    out = fresh_dir()
    call = 1 if writer in ONCE else call
    with failing(monkeypatch, writer, call, _failures()[failure]) as calls:
        with pytest.raises(TrainingError) as error:
            run(config(out))
    assert len(calls) >= call
    message = str(error.value)
    assert message.startswith("could not write ") and "Nothing was lost: the newest complete checkpoint is" in message
    assert message.endswith("run the same command with --resume"), message
    assert_checkpoints_sound(out)
    run(config(out), resume=True)
    assert run_outcome(out) == reference


# ---------------------------------------------------------------------------------------------------------- numbers
@contextmanager
def injected(monkeypatch: pytest.MonkeyPatch, gradients: set[int] = frozenset(), weights: set[int] = frozenset()):
    """NaN gradients at the backward passes numbered ``gradients`` (1-based, one per batch) and an infinite weight
    after the optimiser steps numbered ``weights``."""
    backward, step = Accelerator.backward, torch.optim.Adam.step
    counts = {"backward": 0, "step": 0}

    def nan_gradients(self, loss, **kwargs):
        backward(self, loss, **kwargs)
        counts["backward"] += 1
        if counts["backward"] in gradients:
            next(p for p in self._models[0].parameters() if p.grad is not None).grad.view(-1)[0] = math.nan

    def inf_weights(self, *args, **kwargs):
        result = step(self, *args, **kwargs)
        counts["step"] += 1
        if counts["step"] in weights:
            with torch.no_grad():
                self.param_groups[0]["params"][0].view(-1)[0] = math.inf
        return result

    with monkeypatch.context() as m:
        m.setattr(Accelerator, "backward", nan_gradients)
        m.setattr(torch.optim.Adam, "step", inf_weights)
        yield


def _three_in_a_row(batches: set[int]) -> bool:
    return any({b, b + 1, b + 2} <= batches for b in batches)


@EXAMPLES
@given(batches=st.sets(st.integers(1, 4), min_size=1, max_size=3))
def test_non_finite_gradients_are_skipped_or_stop_the_run_clearly(monkeypatch, reference, batches):
    out = fresh_dir()
    with injected(monkeypatch, gradients=batches):
        if _three_in_a_row(batches):
            with pytest.raises(DivergenceError, match=r"training diverged at step \d+ .*3 steps in a row had a "
                                                      r"non-finite gradient"):
                run(config(out))
        else:
            with pytest.warns(UserWarning, match="non-finite gradient .*step skipped"):
                summary = run(config(out))
            assert summary["steps"] == reference["summary"]["steps"]  # a skipped step is a step of the schedule
            assert all(t.isfinite().all() for t in load_file(out / "model.safetensors").values())
    assert_checkpoints_sound(out)


@EXAMPLES
@given(step=st.integers(1, 4))
def test_a_non_finite_weight_stops_the_run_and_the_resume_ends_identical(monkeypatch, reference, run_outcome, step):
    out = fresh_dir()
    with injected(monkeypatch, weights={step}):
        with pytest.raises(DivergenceError, match=rf"training diverged at step {step} .*made 1 weight tensors "
                                                  "non-finite"):
            run(config(out))
    assert_checkpoints_sound(out)
    kept = sorted(p.name for p in (out / "checkpoints").glob("step-*"))
    assert f"step-{step - 1:06d}" in kept if step > 1 else kept == []  # the last finite one, never pruned
    run(config(out), resume=True)
    assert run_outcome(out) == reference


def test_the_bad_step_count_survives_a_resume(monkeypatch):
    """Two skipped steps end epoch 0 (its checkpoint records them); the run stops there. Resumed, one more skipped
    step makes three in a row — before, the count restarted at 0 and the run went on."""
    out = fresh_dir()

    class Stop(BaseException):
        pass

    save = CheckpointManager.save

    def save_then_stop(self, step, state, protect=()):
        path = save(self, step, state, protect)
        if state["epoch"] == 1:
            raise Stop
        return path

    with injected(monkeypatch, gradients={1, 2}), monkeypatch.context() as m:
        m.setattr(CheckpointManager, "save", save_then_stop)
        with pytest.warns(UserWarning, match="step skipped"), pytest.raises(Stop):
            run(config(out))
    state = checkpointing.read_json_object(out / "checkpoints" / "step-000002" / "trainer_state.json", "state")
    assert state["bad_steps"] == 2 and (out / "checkpoints" / "step-000002" / MANIFEST).is_file()
    with injected(monkeypatch, gradients={1}), pytest.warns(UserWarning, match="step skipped"):
        with pytest.raises(DivergenceError, match="3 steps in a row had a non-finite gradient"):
            run(config(out), resume=True)
