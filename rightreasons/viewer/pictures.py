"""Tensors → the PNG data URIs the page embeds: the model's view of an image and the picture of an explanation.

An explanation is drawn as the project draws it elsewhere (:mod:`rightreasons.explain.visualize`, ``rightreasons
explain``): B-cos weights ``W(x)`` of a six-channel input as the colour explanation
(:func:`~rightreasons.explain.to_rgba`, RGBA), any other map as contributions, blue negative to red positive with
symmetric limits (:func:`~rightreasons.explain.visualize.contribution_limits`).
"""

from __future__ import annotations

import base64
import io

import matplotlib
import numpy as np
from matplotlib.colors import Normalize
from PIL import Image
from torch import Tensor

from ..explain import to_rgba
from ..explain.visualize import contribution_limits

__all__ = ["explanation_uri", "png_uri", "rgb_uri"]


def png_uri(pixels: np.ndarray) -> str:
    """``pixels`` ``[H, W, 3|4]`` float in [0, 1] as a ``data:image/png;base64,…`` URI."""
    array = (np.clip(pixels, 0.0, 1.0) * 255).round().astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def rgb_uri(rgb: Tensor) -> str:
    """An RGB image ``[3, H, W]`` in [0, 1] as a PNG data URI."""
    return png_uri(rgb.detach().float().cpu().permute(1, 2, 0).numpy())


def explanation_uri(image: Tensor, attribution_map: Tensor, weights: Tensor | None) -> str:
    """The picture of one explanation as a PNG data URI: the colour explanation of ``weights`` ``[6, H, W]`` (``W(x)``
    of the encoded ``image [6, H, W]``) when given, else ``attribution_map [H, W]`` coloured blue to red."""
    if weights is not None and image.shape[0] == 6:
        return png_uri(to_rgba(image, weights).numpy())
    values = attribution_map.detach().float().cpu()
    limit = contribution_limits(values)
    return png_uri(matplotlib.colormaps["bwr"](Normalize(-limit, limit)(values.numpy())))
