"""The errors rightreasons raises for bad input, all under one base class, :class:`RightReasonsError`.

Every problem caused by what a user gave us — a config key, a dataset file, a checkpoint, a cache directory, a model
name, a command-line argument — is raised as a subclass of :class:`RightReasonsError` whose message names the file, key
or value and says what was expected. The command line turns these (and only these) into one ``error:`` line and exit
code 2; any other exception is a bug in rightreasons and keeps its traceback.

Each class also derives from the builtin exception that describes it (``ValueError``, ``KeyError``,
``FileNotFoundError``, ``RuntimeError``), so ``except ValueError`` around a config load keeps working. Every class
takes a single message argument, so a ``DataLoader`` worker's error is re-raised in the main process with the same
type and message.

This module imports nothing of rightreasons, so that every layer can raise these errors.
"""

from __future__ import annotations

__all__ = ["CacheError", "CheckpointError", "ConfigError", "DataError", "DivergenceError", "NonFiniteError",
           "RightReasonsError", "TrainingError", "UnknownNameError", "UsageError", "WeightsUnavailableError"]


class RightReasonsError(Exception):
    """Base of every error raised for bad input; the message names what was wrong and what was expected."""


class ConfigError(RightReasonsError, ValueError):
    """A config value or key that does not fit the schema; the message names the key path and what was expected."""


class DataError(RightReasonsError, ValueError):
    """A dataset file, record or image is missing or malformed; the message names file, record and problem."""


class CheckpointError(RightReasonsError, ValueError):
    """A weights or checkpoint file that cannot be read or does not fit the model; the message names the file."""


class CacheError(RightReasonsError, ValueError):
    """A cache of teacher explanations that cannot be used; the message names the directory or shard."""


class TrainingError(RightReasonsError, RuntimeError):
    """Training cannot start or go on (e.g. repeated non-finite losses); the message says why and what to check."""


class NonFiniteError(RightReasonsError, ValueError):
    """A model output or a metric that is NaN or infinite where a command would use or write a number; the message
    names the model or file and the value that was not finite."""


class DivergenceError(TrainingError):
    """Training diverged: non-finite gradients several steps in a row, non-finite weights or non-finite validation
    metrics; the message names the step and what was non-finite, and the last finite checkpoint is kept."""


class UsageError(RightReasonsError, ValueError):
    """Arguments of a function or command that contradict each other or are out of range."""


class UnknownNameError(RightReasonsError, KeyError):
    """A name looked up in a registry (model, weights, method, dataset) that is not there; the message lists the
    valid or closest names."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""


class WeightsUnavailableError(RightReasonsError, FileNotFoundError):
    """Released weights that are neither on disk nor downloadable; the message says what to download and where."""
