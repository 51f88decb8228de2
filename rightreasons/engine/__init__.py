"""The training engine on Hugging Face accelerate: configs, the training loop, checkpoints and evaluation."""

from .config import ConfigError, apply_overrides, from_dict, load_config, to_dict
from .schema import TrainConfig
from .trainer import Trainer, TrainingError, train

__all__ = ["ConfigError", "TrainConfig", "Trainer", "TrainingError", "apply_overrides", "from_dict", "load_config",
           "to_dict", "train"]
