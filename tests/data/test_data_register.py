"""``register_dataset`` and datasets named by module path (``package.module:builder``) in ``load_dataset`` and
configs: options checked as the built-in datasets' are."""

from __future__ import annotations

import pytest

from rightreasons import data
from rightreasons.data import AnnotatedDataset, default_test_split, load_dataset, load_synthetic, register_dataset
from rightreasons.errors import UnknownNameError, UsageError


@pytest.fixture(autouse=True)
def _registry(monkeypatch):
    """Registrations of a test stay in it."""
    monkeypatch.setattr(data, "DATASETS", dict(data.DATASETS))
    monkeypatch.setattr(data, "DATASET_SPLITS", dict(data.DATASET_SPLITS))


def tiny_birds(root, split: str, *, n: int = 4, **options) -> AnnotatedDataset:
    """A dataset of one's own: ``n`` synthetic birds whatever ``root`` says."""
    return load_synthetic("synthetic-birds", None, split, n=n, size=32, **options)


def test_a_registered_dataset_loads_with_its_options_checked():
    register_dataset("tiny-birds", tiny_birds, splits=("train", "val"))
    ds = load_dataset("tiny-birds", "unused", "train", n=3, box_policy="error")
    assert len(ds) == 3 and ds.classes == ("landbird", "waterbird")
    assert default_test_split("tiny-birds") == "val"
    with pytest.raises(UsageError, match=r"unknown option\(s\) m for dataset 'tiny-birds'; valid: n, transform"):
        load_dataset("tiny-birds", "unused", "train", m=3)
    with pytest.raises(UsageError, match="dataset 'tiny-birds' is registered already"):
        register_dataset("tiny-birds", tiny_birds)
    with pytest.raises(UsageError, match="must be callable"):
        register_dataset("other", "tiny_birds")


def test_a_module_path_names_a_builder():
    name = "test_data_register:tiny_birds"
    assert len(load_dataset(name, "unused", "val", n=2)) == 2 and default_test_split(name) == "test"
    with pytest.raises(UnknownNameError, match="dataset 'no_such_module:x': cannot import 'x' from module "
                                               "'no_such_module'.*expected package.module:builder"):
        load_dataset("no_such_module:x", "unused", "train")
    with pytest.raises(UnknownNameError, match="cannot import 'missing' from module 'rightreasons.data.coco_json'"):
        load_dataset("rightreasons.data.coco_json:missing", "unused", "train")
