"""The tiny guided run that the engine's run-level tests train through the real command line or :func:`engine.run`:
a width-4 B-cos ResNet-18 on ``synthetic-birds`` at 32 px, half the images with boxes, Adam, no validation images.

A module rather than a ``conftest.py`` fixture because tests build module-level configs from it, and pytest imports
every ``conftest.py`` as ``conftest``.
"""

from __future__ import annotations

from typing import Any


def tiny_guided_config(**changes: Any) -> dict[str, Any]:
    """A fresh config dict of the tiny guided run; ``changes`` replace values by dotted key (``"optim.epochs": 2``,
    ``"data.options": {...}``) or add top-level keys (``compile="aot_eager"``)."""
    config: dict[str, Any] = {
        "seed": 0, "cpu": True, "log_every": 1,
        "model": {"name": "bcos_resnet18", "kwargs": {"inplanes": 4}},
        "data": {"name": "synthetic-birds", "image_size": 32, "batch_size": 4, "eval_batch_size": 8,
                 "annotated_fraction": 0.5, "options": {"n": 12, "size": 32}},
        "optim": {"name": "adam", "lr": 1e-3, "epochs": 1},
        "guidance": {"weight": 1.0},
        "eval": {"num_images": 0},
        "checkpoint": {}}
    for key, value in changes.items():
        section, _, field = key.partition(".")
        if field:
            config[section][field] = value
        else:
            config[key] = value
    return config
