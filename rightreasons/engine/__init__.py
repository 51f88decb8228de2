"""The training engine on Hugging Face accelerate: the generic :class:`Trainer` and its :class:`Task` interface, the
run config schema, checkpoints, samplers and optimisers. What is trained lives in :mod:`rightreasons.tasks`; typed
config loading in :mod:`rightreasons.config`."""

from .schema import TrainConfig
from .trainer import Step, Task, Trainer, train

__all__ = ["Step", "Task", "TrainConfig", "Trainer", "train"]
