"""What the engine trains, and how a feature joins it: the :class:`Task` interface, :class:`Hook` and the task registry.

A task owns everything the engine does not know: its config class, datasets, model, input encoding, objective, the
evaluators that score it, and hooks at fixed points of the loop (explanation images, schedules of the model). The
trainer (:mod:`rightreasons.engine.trainer`) calls it in a fixed order, documented there.

A feature registers its task under the name of its command at the end of its task module
(``register_task("guide", GuidanceTask)``), as a model file registers its architectures; :func:`task_for_config`
finds the task of a config, and :func:`task_for_keys` the task of a raw config file by its top-level keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..data import eval_transform, train_transform
from ..errors import UnknownNameError
from ..metrics.evaluation import Evaluator
from .config import TrainConfig
from .data import EpochSampler

__all__ = ["Hook", "Step", "Task", "get_task", "register_task", "task_for_config", "task_for_keys", "task_names"]


@dataclass(frozen=True)
class Step:
    """What a task's :meth:`Task.losses` may need of the run at one step.

    Attributes:
        generator: a CPU generator seeded by ``(seed, step, batch, rank)``, for the step's own randomness (e.g. the
            class guidance explains).
        world_size: number of processes; DDP averages gradients over them.
        sum_across_processes: ``tensor -> its sum over all processes`` (identity on one process).
        index: the optimiser steps done before this batch (0-based; the micro-batches of one accumulated step share
            it), e.g. for a loss term computed only every K steps.
        loss_scale: the dynamic loss scale of ``mixed_precision: fp16`` (1 otherwise; a 0-d tensor on the device, so
            that nobody waits for its value): the total is back-propagated times this scale, and a gradient the task takes inside its loss (an explanation's, with
            ``create_graph=True``) is seeded with it as well (``grad_scale`` of
            :func:`rightreasons.explain.attribute`), so that neither underflows in float16.
    """

    generator: torch.Generator
    world_size: int
    sum_across_processes: Callable[[Tensor], Tensor]
    index: int = 0
    loss_scale: float | Tensor = 1.0


class Hook:
    """Work a task adds at fixed points of the loop; each method does nothing unless overridden."""

    def at_step(self, model: nn.Module, step: int) -> None:
        """The weights of ``model`` (unwrapped) are now those after ``step`` optimiser steps: at the start of the loop
        (0, or where a resumed run stands), after every optimiser step, and before the final evaluations (the step of
        the exported weights). For schedules of the model itself, e.g. the exponent B of B-cosified models."""

    def after_validation(self, trainer: Any, step: int, results: dict[str, Any]) -> None:
        """A validation at optimiser step ``step`` gave ``results`` (called on every process, with the
        :class:`~rightreasons.engine.trainer.Trainer`), e.g. to draw explanation images."""


class Task:
    """What a run trains and how it is scored; :mod:`rightreasons.engine.trainer` says when the trainer calls what.

    Subclasses set :attr:`config_class` and implement :meth:`build_datasets`, :meth:`build_model`,
    :meth:`input_encoding`, :meth:`losses`, :meth:`evaluators` and :meth:`save_model`; the transforms default to the
    presets of ``config.data``.
    """

    #: the name it is registered under (:func:`register_task`): the command that trains it
    name: str = ""
    #: the config this task trains from (a subclass of :class:`~rightreasons.engine.config.TrainConfig`)
    config_class: type[TrainConfig] = TrainConfig
    #: the validation metrics the Pareto front is taken over (all maximised; ``score`` is the task's selection score)
    objectives: tuple[str, ...] = ("score",)

    def __init__(self, config: TrainConfig) -> None:
        self.config = config

    def build_datasets(self) -> tuple[Any, Any]:
        """The training and validation sets, without transforms (the trainer sets them once the model is built)."""
        raise NotImplementedError

    def build_model(self, train_set: Any) -> nn.Module:
        """The model being trained."""
        raise NotImplementedError

    def distribute(self, model: nn.Module, processes: int) -> nn.Module:
        """The model prepared for ``processes`` > 1 processes before the accelerator wraps it (e.g. synchronised
        BatchNorm); unchanged by default."""
        return model

    def input_encoding(self, model: nn.Module) -> str:
        """The input encoding ``model`` reads (:mod:`rightreasons.encoding`); the transforms end in it."""
        raise NotImplementedError

    def train_transform(self, encoding: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """The augmentation of training samples, ending in the model's input ``encoding`` (seeded by the trainer)."""
        data = self.config.data
        if data.augment:
            return train_transform(data.image_size, encoding=encoding, scale=tuple(data.crop_scale),
                                   rotation=data.rotation)
        return self.eval_transform(encoding)

    def eval_transform(self, encoding: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """The deterministic view of evaluation samples, ending in the model's input ``encoding``."""
        return eval_transform(self.config.data.image_size, encoding=encoding, crop_fraction=1.0)

    def train_sampler(self, train_set: Any) -> EpochSampler:
        """The order of the training images: a seeded permutation per epoch (:class:`EpochSampler`)."""
        return EpochSampler(len(train_set), self.config.seed)

    def default_agc(self, model: nn.Module) -> float | None:
        """The clip factor of adaptive gradient clipping when ``optim.agc`` is ``auto``; off by default."""
        return None

    def setup(self, trainer: Any) -> None:
        """Called with the :class:`~rightreasons.engine.trainer.Trainer` once the model, data, optimiser and
        accelerator are ready (e.g. to move a teacher to the device)."""

    def hooks(self, trainer: Any) -> list[Hook]:
        """The hooks of this run (called with the trainer after :meth:`setup`); none by default."""
        return []

    def losses(self, model: nn.Module, batch: dict[str, Any], step: Step) -> tuple[dict[str, Tensor], Tensor]:
        """Named loss terms (unweighted, for logging) and the weighted total to back-propagate, from one forward
        pass of ``model`` (the prepared, possibly DDP-wrapped model)."""
        raise NotImplementedError

    def evaluators(self, dataset: Any) -> list[Evaluator]:
        """Fresh evaluators for one evaluation of ``dataset``; their results must include ``score`` and may say
        which metric it is in ``score_metric`` (e.g. ``"accuracy"``; reported with the best score)."""
        raise NotImplementedError

    def final_evaluations(self) -> dict[str, Any]:
        """Datasets evaluated once after training, by summary key (e.g. ``{"test": test_set}``); none by default."""
        return {}

    def save_model(self, model: nn.Module, path: Any, metadata: dict[str, str]) -> None:
        """Write the trained ``model`` (unwrapped) to ``path`` with ``metadata``; called on the main process."""
        raise NotImplementedError


_TASKS: dict[str, type[Task]] = {}


def register_task(name: str, task: type[Task]) -> type[Task]:
    """Register ``task`` under ``name`` (the command that trains it, e.g. ``guide``); names are unique."""
    if _TASKS.get(name, task) is not task:
        raise ValueError(f"task name {name!r} is already registered")
    _TASKS[name] = task
    task.name = name
    return task


def task_names() -> list[str]:
    """The registered task names, in registration order."""
    return list(_TASKS)


def get_task(name: str) -> type[Task]:
    """The task registered under ``name``."""
    if name not in _TASKS:
        raise UnknownNameError(f"unknown task {name!r}; registered: {task_names()}")
    return _TASKS[name]


def task_for_config(config: TrainConfig) -> type[Task]:
    """The task whose config class ``config`` is (exactly)."""
    for task in _TASKS.values():
        if type(config) is task.config_class:
            return task
    raise UnknownNameError(f"no registered task trains a {type(config).__name__}; registered: {task_names()}")


def task_for_keys(keys: Collection[str]) -> type[Task]:
    """The task a raw config with top-level ``keys`` describes: the registered task whose config takes the most of
    them, of those the one with the fewest sections (a config without a ``guidance`` section is a plain training, one
    with it a guided one). Keys that no config takes are left for the config loader to refuse by name."""
    def fields(task: type[Task]) -> set[str]:
        return {f.name for f in dataclasses.fields(task.config_class)}

    if not _TASKS:
        raise UnknownNameError("no task is registered")
    return min(_TASKS.values(), key=lambda t: (len(set(keys) - fields(t)), len(fields(t))))
