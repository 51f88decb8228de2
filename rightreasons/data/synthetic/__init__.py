"""The built-in synthetic benchmark: procedurally drawn images with boxes, deterministic by seed.

``synthetic-birds`` (Waterbirds-like) and ``synthetic-multilabel`` (VOC-like) are described in
:mod:`.generate`; the drawing primitives live in :mod:`.draw`; the on-disk format and the datasets in
:mod:`.storage`.
"""

from .draw import SHAPES
from .generate import (BIRD_CLASSES, CONTEXT_OF_SHAPE, CONTEXTS, DEFAULT_SIZES, PLACES, SPLITS, SyntheticConfig,
                       SyntheticData, generate)
from .storage import NAMES, SyntheticDataset, load_synthetic, write_synthetic

__all__ = ["BIRD_CLASSES", "CONTEXTS", "CONTEXT_OF_SHAPE", "DEFAULT_SIZES", "NAMES", "PLACES", "SHAPES", "SPLITS",
           "SyntheticConfig", "SyntheticData", "SyntheticDataset", "generate", "load_synthetic", "write_synthetic"]
