"""The skip and divergence rules decided on the device (``rightreasons.engine.step_guard``): a skipped step changes
no weight and no optimiser state but is a step of the schedule; a divergence the host learns of only at the next
logged step stops the run naming the step where it happened, with the weights as they were then (every later step
is skipped on the device); the finiteness check is exact."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from rightreasons.classification import ClassificationConfig, ClassificationTask
from rightreasons.config import from_dict
from rightreasons.engine import Trainer
from rightreasons.engine.step_guard import all_finite, finite_each
from rightreasons.errors import DivergenceError


def trainer(tmp_path, log_every: int = 100) -> Trainer:
    """A tiny classifier: one epoch of 6 steps; ``log_every`` beyond it, so the host reads the steps at step 1 and at
    the end of the epoch only."""
    return Trainer(ClassificationTask(from_dict(ClassificationConfig, {
        "output_dir": str(tmp_path / "run"), "cpu": True, "log_every": log_every, "log_with": [],
        "model": {"name": "bcos_cifar10_resnet20"}, "eval": {"num_images": 0},
        "data": {"image_size": 16, "batch_size": 4, "options": {"n": 24}}, "optim": {"epochs": 1}})))


def nan_losses_at(monkeypatch, run: Trainer, steps: set[int]) -> None:
    """The task's total loss is NaN at the optimiser steps numbered ``steps`` (1-based)."""
    losses = run.task.losses

    def poisoned(model, batch, step):
        terms, total = losses(model, batch, step)
        return terms, total * math.nan if step.index + 1 in steps else total

    monkeypatch.setattr(run.task, "losses", poisoned)


def weights_after(monkeypatch, run: Trainer, step: int) -> dict[str, torch.Tensor]:
    """Filled with a copy of the parameters when optimiser step ``step`` is done (buffers, such as BatchNorm's running
    statistics, change with every forward pass, a skipped step's too)."""
    snapshot: dict[str, torch.Tensor] = {}
    at_step = run._at_step

    def recording(number: int) -> None:
        if number == step:
            snapshot.update({k: v.detach().clone() for k, v in run.bare_model.named_parameters()})
        at_step(number)

    monkeypatch.setattr(run, "_at_step", recording)
    return snapshot


def test_a_skipped_step_changes_no_weight_and_no_optimiser_state_but_moves_the_schedule(tmp_path, monkeypatch):
    run = trainer(tmp_path)
    batches = iter(run.loader)
    run.train_step(next(batches))
    weights = copy.deepcopy(dict(run.bare_model.named_parameters()))
    state = copy.deepcopy(run.optimizer.optimizer.state_dict())
    schedule = run.scheduler.scheduler.last_epoch
    nan_losses_at(monkeypatch, run, {1})  # the step index is the loop's, still 0 here
    run.train_step(next(batches))
    assert all(torch.equal(weights[k], v) for k, v in run.bare_model.named_parameters())
    after = run.optimizer.optimizer.state_dict()["state"]
    assert all(torch.equal(state["state"][p][k], v) for p, s in after.items() for k, v in s.items())
    assert run.scheduler.scheduler.last_epoch == schedule + 1
    with pytest.warns(UserWarning, match=r"non-finite loss at epoch 1, batch 1 .*step skipped"):
        run.read_steps()
    assert run.bad_steps == 1


def test_a_divergence_read_late_names_its_step_and_keeps_the_weights_it_had(tmp_path, monkeypatch):
    """Steps 2, 3 and 4 of 6 are non-finite; the host reads them only at the end of the epoch. The run stops naming
    step 4, with the weights of step 1: steps 5 and 6 (finite) were skipped on the device because it had diverged."""
    run = trainer(tmp_path)
    nan_losses_at(monkeypatch, run, {2, 3, 4})
    after_first = weights_after(monkeypatch, run, 1)
    with pytest.warns(UserWarning, match="step skipped"):
        with pytest.raises(DivergenceError, match=r"training diverged at step 4 \(epoch 1\): 3 steps in a row had a "
                                                  r"non-finite loss"):
            run.fit()
    assert after_first and all(torch.equal(after_first[k], v) for k, v in run.bare_model.named_parameters())
    assert run.position.step == 6 and not list((tmp_path / "run" / "checkpoints").glob("step-*"))


def test_two_skipped_steps_then_a_finite_one_train_on(tmp_path, monkeypatch):
    run = trainer(tmp_path)
    nan_losses_at(monkeypatch, run, {2, 3})
    with pytest.warns(UserWarning, match="step skipped"):
        summary = run.fit()
    assert summary["steps"] == 6 and run.bad_steps == 0


def test_a_non_finite_weight_read_late_names_its_step(tmp_path, monkeypatch):
    run = trainer(tmp_path)
    optimizer_step = run._optimizer_step
    calls = []

    def poisoning(skip):
        optimizer_step(skip)
        calls.append(1)
        if len(calls) == 2:
            with torch.no_grad():
                next(run.bare_model.parameters()).view(-1)[0] = math.inf

    monkeypatch.setattr(run, "_optimizer_step", poisoning)
    after_second = weights_after(monkeypatch, run, 2)
    with pytest.raises(DivergenceError, match=r"training diverged at step 2 \(epoch 1\): the optimiser step made 1 "
                                              r"weight tensors non-finite"):
        run.fit()
    assert all(torch.equal(after_second[k], v) for k, v in run.bare_model.named_parameters())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_the_finiteness_check_is_exact(dtype):
    device = torch.device("cpu")
    big = torch.finfo(dtype).max
    assert all_finite([torch.full((1000,), big, dtype=dtype), torch.zeros(3, dtype=dtype)], device)  # no overflow
    for bad in (math.inf, -math.inf, math.nan):
        tensors = [torch.ones(5, dtype=dtype), torch.ones(7, dtype=dtype), torch.ones(2, dtype=torch.float64)]
        tensors[1][3] = bad
        assert not all_finite(tensors, device), bad
        assert finite_each(tensors, device).tolist() == [True, False, True]
    assert all_finite([], device)
