"""Fixed names and defaults that the command line offers before a command runs, importable without torch.

``rightreasons COMMAND --help`` builds the command's parser and should answer at once (see
[`rightreasons.apps.cli`][rightreasons.apps.cli]), but the modules that implement these values import torch. So each
list a parser needs lives here, once, and the implementing module imports it from here:

* the synthetic benchmark (``rightreasons.data.synthetic``): its dataset names, splits and default split sizes
  (``rightreasons data synth``);
* how a B-cosified unit scales its weight (``rightreasons.bcos.layers``; ``rightreasons bcosify --weight-mode``);
* what a class's region is made of (``rightreasons.regions``; ``evaluate``, ``view`` and ``judge --regions``).

Lists derived from a table of callables stay with their table (the explanation methods of
``rightreasons.explain.methods``); a parser that offers those checks the value when the command runs.

This module imports nothing.
"""

from __future__ import annotations

__all__ = ["REGION_NAMES", "SYNTHETIC_NAMES", "SYNTHETIC_SIZES", "SYNTHETIC_SPLITS", "WEIGHT_MODES"]

SYNTHETIC_NAMES: dict[str, str] = {"synthetic-birds": "birds", "synthetic-multilabel": "multilabel"}
"""Synthetic dataset name → the generation task that draws it."""

SYNTHETIC_SPLITS: tuple[str, ...] = ("train", "val", "test")
"""The splits of every synthetic dataset."""

SYNTHETIC_SIZES: dict[str, int] = {"train": 2000, "val": 500, "test": 1000}
"""Images per split of a synthetic dataset unless a config says otherwise."""

WEIGHT_MODES: tuple[str, ...] = ("raw", "gain")
"""How a B-cosified unit scales its weight: ``raw`` uses ``w`` as it is, ``gain`` uses ``g · w / ‖w‖``."""

REGION_NAMES: tuple[str, ...] = ("boxes", "masks", "points", "masks-else-boxes", "union")
"""The choices of what a class's region is made of, in the order of ``rightreasons.regions.REGIONS``."""
