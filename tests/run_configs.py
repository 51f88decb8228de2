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


#: the rows of the tiny Waterbirds-100 copy that command-line tests train on (``write_waterbirds`` fixture): (image,
#: class, place, split, bird box) — four training images per class (two steps of batch 4 an epoch), one validation
#: and one test image per class
TINY_WATERBIRDS_ROWS = (
    [(f"002.Sparrow/train_{i}.jpg", 0, 0, 0, (2, 2, 20, 16)) for i in range(4)]
    + [(f"001.Albatross/train_{i}.jpg", 1, 1, 0, (8, 4, 30, 22)) for i in range(4)]
    + [("002.Sparrow/val_0.jpg", 0, 0, 1, (1, 1, 12, 12)), ("001.Albatross/val_0.jpg", 1, 1, 1, (4, 4, 20, 20))]
    + [("002.Sparrow/test_0.jpg", 0, 0, 2, (3, 3, 18, 18)), ("001.Albatross/test_0.jpg", 1, 1, 2, (3, 3, 18, 18))])
