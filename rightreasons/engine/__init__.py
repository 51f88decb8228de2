"""The training engine on Hugging Face accelerate: the generic :class:`Trainer`, the :class:`Task` interface every
feature implements (and registers), the base :class:`TrainConfig`, checkpoints, samplers, optimisers and the run grid.
The engine knows nothing of models, explanations or what a task optimises; typed config loading is
:mod:`rightreasons.config`."""

from .config import TrainConfig
from .task import Hook, Step, Task, get_task, register_task, task_for_config, task_for_keys, task_names
from .trainer import Trainer, run, train

__all__ = ["Hook", "Step", "Task", "TrainConfig", "Trainer", "get_task", "register_task", "run",
           "task_for_config", "task_for_keys", "task_names", "train"]
