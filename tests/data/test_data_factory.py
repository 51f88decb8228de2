"""``load_dataset``: names and options are validated with messages that list the valid ones."""

import pytest

from rightreasons.data import COMMON_OPTIONS, DATASETS, load_dataset
from rightreasons.errors import UnknownNameError, UsageError


def test_every_name_is_registered():
    assert list(DATASETS) == ["voc2007", "coco2014", "waterbirds100", "imagenet", "synthetic-birds",
                              "synthetic-multilabel"]


def test_unknown_names_and_options_list_the_valid_ones(tmp_path):
    with pytest.raises(UnknownNameError, match="unknown dataset 'voc2012'; expected one of voc2007, coco2014, "
                                               "waterbirds100, imagenet, synthetic-birds, synthetic-multilabel"):
        load_dataset("voc2012", tmp_path, "train")
    with pytest.raises(UsageError, match=r"unknown option\(s\) crowd for dataset 'voc2007'; valid: use_difficult, "
                                         r"segmentation_only, box_policy, transform, annotated_fraction"):
        load_dataset("voc2007", tmp_path, "train", crowd="label")
    with pytest.raises(UsageError, match="needs a root directory"):
        load_dataset("coco2014", None, "train")
    assert set(COMMON_OPTIONS) == {"transform", "annotated_fraction", "annotation_seed", "box_dilation", "box_policy",
                                   "max_pixels"}


def test_synthetic_datasets_are_generated_in_memory_without_a_root():
    ds = load_dataset("synthetic-birds", None, "val", n=6, size=32, seed=1, box_policy="error")
    assert len(ds) == 6 and ds.classes == ("landbird", "waterbird") and set(ds.groups.tolist()) <= {0, 3}
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        load_dataset("synthetic-multilabel", None, "dev", n=2)
