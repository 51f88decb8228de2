"""``load_dataset``: names and options are validated with messages that list the valid ones."""

import pytest

from rightreasons.data import COMMON_OPTIONS, DATASET_SPLITS, DATASETS, default_test_split, load_dataset
from rightreasons.errors import UnknownNameError, UsageError


def test_every_name_is_registered():
    assert list(DATASETS) == ["voc2007", "coco2014", "coco-json", "folder", "waterbirds100", "imagenet",
                              "synthetic-birds", "synthetic-multilabel"]


def test_unknown_names_and_options_list_the_valid_ones(tmp_path):
    with pytest.raises(UnknownNameError, match="unknown dataset 'voc2012'; expected one of voc2007, coco2014, "
                                               "coco-json, folder, waterbirds100, imagenet, synthetic-birds, synthetic-multilabel"):
        load_dataset("voc2012", tmp_path, "train")
    with pytest.raises(UsageError, match=r"unknown option\(s\) crowd for dataset 'voc2007'; valid: use_difficult, "
                                         r"segmentation_only, box_policy, transform, annotated_fraction"):
        load_dataset("voc2007", tmp_path, "train", crowd="label")
    with pytest.raises(UsageError, match="needs a root directory"):
        load_dataset("coco2014", None, "train")
    assert set(COMMON_OPTIONS) == {"transform", "annotated_fraction", "annotation_seed", "box_dilation", "box_policy",
                                   "max_pixels"}


def test_synthetic_datasets_are_generated_in_memory_without_a_root():
    ds = load_dataset("synthetic-birds", None, "train", n=6, size=32, seed=1, box_policy="error")
    assert len(ds) == 6 and ds.classes == ("landbird", "waterbird") and set(ds.groups.tolist()) <= {0, 3}
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        load_dataset("synthetic-multilabel", None, "dev", n=2)


def test_each_dataset_knows_its_splits_and_the_one_a_model_is_tested_on(tmp_path, write_voc):
    assert set(DATASET_SPLITS) == set(DATASETS)
    assert {name: default_test_split(name) for name in DATASETS} == {
        "voc2007": "test", "coco2014": "val", "coco-json": "test", "folder": "test",
        "waterbirds100": "test", "imagenet": "val", "synthetic-birds": "test",
        "synthetic-multilabel": "test"}
    # an unknown split is a user error (one `error:` line on the command line) that lists the valid ones
    voc = write_voc(tmp_path, {}, {"train": []})
    for name, root, message in (
            ("coco2014", tmp_path, "unknown COCO split 'test'; expected one of train, val .*no test annotations"),
            ("voc2007", voc, "unknown VOC split 'dev'"), ("waterbirds100", tmp_path, "unknown Waterbirds split 'dev'"),
            ("synthetic-birds", None, "unknown split 'dev'")):
        with pytest.raises(UsageError, match=message):
            load_dataset(name, root, "test" if name == "coco2014" else "dev")
