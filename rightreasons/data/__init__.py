"""Datasets with class labels and boxes for guidance and distillation, in one sample format.

``load_dataset(name, root, split, **options)`` builds any of :data:`DATASETS`; every sample is a dict described in
:mod:`rightreasons.data.sample` and batches come from :func:`collate`. Box-aware augmentation presets live in
:mod:`rightreasons.data.transforms`, the validation of annotated boxes in :mod:`rightreasons.data.box_policy` (box
geometry itself is :mod:`rightreasons.boxes`). Problems with files raise :class:`DataError` naming the file, record
and problem.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable, Sequence
from functools import partial

from ..errors import UnknownNameError, UsageError
from .annotations import annotated_count, select_annotated
from .base import AnnotatedDataset, Records
from .box_policy import BOX_POLICIES, check_boxes
from .coco import COCO_SPLITS, COCO2014, HOLDOUT_SPLIT
from .coco_json import COCO_JSON_SPLITS, CocoJson
from .errors import BoxWarning, DataError
from .folder import FOLDER_SPLITS, FolderDataset
from .geometry import Points, SegmentationMask
from .imagenet import ImageNet
from .sample import collate, make_sample
from .synthetic import SPLITS as SYNTHETIC_SPLITS
from .synthetic import SyntheticConfig, generate, load_synthetic, write_synthetic
from .transforms import (AttachExplanations, ExplanationMap, SanitizeBoxes, base_view, eval_transform,
                         train_transform, transforms_for)
from .voc import VOC_CLASSES, VOC_SPLITS, VOC2007
from .waterbirds import GROUP_NAMES, WATERBIRDS_SPLITS, Waterbirds100

__all__ = ["BOX_POLICIES", "COMMON_OPTIONS", "DATASETS", "DATASET_SPLITS", "GROUP_NAMES", "VOC_CLASSES",
           "AnnotatedDataset",
           "AttachExplanations", "BoxWarning", "COCO2014", "CocoJson", "DataError", "ExplanationMap", "FolderDataset",
           "ImageNet", "Points", "Records",
           "SanitizeBoxes", "SegmentationMask", "SyntheticConfig", "VOC2007", "Waterbirds100", "annotated_count", "base_view",
           "check_boxes", "collate", "default_test_split", "eval_transform", "generate", "load_dataset",
           "load_synthetic", "make_sample", "register_dataset", "select_annotated", "train_transform", "transforms_for",
           "write_synthetic"]


#: name → builder ``(root, split, **options)``; ``root`` may be None for the synthetic datasets (generated in memory);
#: extended by :func:`register_dataset`
DATASETS: dict[str, Callable[..., AnnotatedDataset]] = {
    "voc2007": VOC2007,
    "coco2014": COCO2014,
    "coco-json": CocoJson,
    "folder": FolderDataset,
    "waterbirds100": Waterbirds100,
    "imagenet": ImageNet,
    "synthetic-birds": partial(load_synthetic, "synthetic-birds"),
    "synthetic-multilabel": partial(load_synthetic, "synthetic-multilabel"),
}

#: name → the splits of its standard layout (ImageNet: the folders ``train/`` and ``val/``; COCO 2014 publishes no
#: test annotations, so its test split is ``val``, and ``holdout``, a held-out part of train2014, validates)
DATASET_SPLITS: dict[str, tuple[str, ...]] = {
    "voc2007": VOC_SPLITS,
    "coco2014": (*COCO_SPLITS, HOLDOUT_SPLIT),
    "coco-json": COCO_JSON_SPLITS,
    "folder": FOLDER_SPLITS,
    "waterbirds100": WATERBIRDS_SPLITS,
    "imagenet": ("train", "val"),
    "synthetic-birds": SYNTHETIC_SPLITS,
    "synthetic-multilabel": SYNTHETIC_SPLITS,
}

_BASE_PARAMETERS = inspect.signature(AnnotatedDataset.__init__).parameters
#: options every dataset accepts
COMMON_OPTIONS = tuple(p for p, v in _BASE_PARAMETERS.items()
                       if v.kind is v.KEYWORD_ONLY and p not in ("name", "split", "image_root", "group_names"))


def register_dataset(name: str, builder: Callable[..., AnnotatedDataset],
                     splits: Sequence[str] = ("train", "val", "test")) -> None:
    """Make ``builder(root, split, **options)`` (an :class:`AnnotatedDataset` subclass or a function returning one)
    dataset ``name`` of :func:`load_dataset` and of a config's ``data.name``; its keyword parameters are its options
    (checked as the built-in datasets' are) and ``splits`` its splits (``evaluate`` scores ``test`` where listed, else
    ``val``). A name already registered is refused."""
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"a dataset name must be a non-empty string, got {name!r}")
    if name in DATASETS:
        raise UsageError(f"dataset {name!r} is registered already")
    if not callable(builder):
        raise UsageError(f"the builder of dataset {name!r} must be callable, got {builder!r}")
    DATASETS[name] = builder
    DATASET_SPLITS[name] = tuple(splits)


def _resolve(name: str) -> str:
    """``name``, after registering ``builder`` of ``package.module`` under it when it is a module path
    ``package.module:builder`` not registered yet (a config's ``data.name`` for a dataset of one's own)."""
    if name in DATASETS or ":" not in name:
        return name
    module, _, attribute = name.partition(":")
    try:
        builder = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError, ValueError) as e:
        raise UnknownNameError(f"dataset {name!r}: cannot import {attribute!r} from module {module!r} "
                               f"({type(e).__name__}: {e}); expected package.module:builder") from e
    register_dataset(name, builder)
    return name


def load_dataset(name: str, root: str | os.PathLike | None, split: str, **options) -> AnnotatedDataset:
    """Build dataset ``name`` (one of :data:`DATASETS`, or ``package.module:builder``, see :func:`register_dataset`)
    from ``root`` for ``split``.

    ``options``: the common ones (``transform``, ``annotated_fraction``, ``annotation_seed``, ``box_dilation``,
    ``box_policy``) and those of the dataset (e.g. ``use_difficult`` for VOC, ``crowd`` for COCO, ``task`` for
    Waterbirds, ``synset_file`` for ImageNet, ``n``/``size``/``correlation``/``difficulty``/``seed`` for the synthetic
    ones). Unknown names or options are errors that list the valid ones.
    """
    name = _resolve(name)
    if name not in DATASETS:
        raise UnknownNameError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
    builder = DATASETS[name]
    own = [p for p in inspect.signature(builder).parameters if p not in ("root", "split", "options")]
    valid = own + [p for p in COMMON_OPTIONS if p not in own]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise UsageError(f"unknown option(s) {', '.join(unknown)} for dataset {name!r}; valid: {', '.join(valid)}")
    if root is None and not name.startswith("synthetic-"):
        raise UsageError(f"dataset {name!r} needs a root directory")
    return builder(root, split, **options)


def default_test_split(name: str) -> str:
    """The split a trained model is scored on by default (``rightreasons evaluate``): ``test`` where dataset ``name``
    has one (VOC 2007, Waterbirds-100, the synthetic sets), else ``val`` (COCO 2014, ImageNet)."""
    name = _resolve(name)
    if name not in DATASET_SPLITS:
        raise UnknownNameError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
    return "test" if "test" in DATASET_SPLITS[name] else "val"
