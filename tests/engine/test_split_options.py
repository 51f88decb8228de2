"""A split's own loader options (``data.split_options``): merged over ``data.options`` for that split, validated, and
written by the guidance recipe for its test split, so that ``evaluate`` scores the images the recipe's report
scored."""

from __future__ import annotations

import json

import pytest

from rightreasons.apps.cli import main
from rightreasons.config import FieldError, from_dict
from rightreasons.engine import run
from rightreasons.engine.config import DataConfig
from rightreasons.errors import ConfigError
from rightreasons.guidance.recipe import DataVariant, GuidanceRecipe


def test_a_split_s_options_are_merged_over_the_common_ones():
    data = DataConfig(options={"n": 512, "size": 32}, split_options={"test": {"n": 200}})
    assert data.options_for("test") == {"n": 200, "size": 32}
    assert data.options_for("train") == {"n": 512, "size": 32}


@pytest.mark.parametrize(("split_options", "message"), [
    ({"test": 200}, "data.split_options.test: expected a mapping"),
    ({"test": {"transform": None}}, "data.split_options.test: expected dataset options other than transform"),
])
def test_bad_split_options_are_refused_naming_the_key(split_options, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        from_dict(DataConfig, {"split_options": split_options}, "data")


def test_split_options_built_in_python_are_checked_too():
    with pytest.raises(FieldError, match="expected a mapping of split names to mappings of options"):
        DataConfig(split_options={1: {"n": 2}})


def test_evaluate_scores_the_test_images_of_a_recipe_run(tmp_path, capsys):
    """The recipe trains on 16 images per split and reports on 6 test images: its run's config says so, and
    ``evaluate`` on the run directory scores those 6."""
    recipe = GuidanceRecipe(model_kwargs={"inplanes": 4}, batch_size=8, baseline_epochs=1, train_images=16,
                            test_images=6)
    config = recipe.run(DataVariant(image_size=32), 0, tmp_path / "baseline").config()
    assert config.data.options_for("test")["n"] == 6 and config.data.options["n"] == 16
    run(config)
    assert main(["evaluate", "--checkpoint", str(tmp_path / "baseline"), "--out", str(tmp_path / "test.json"),
                 "eval.localization=false"]) == 0
    assert json.loads((tmp_path / "test.json").read_text())["images"] == recipe.test_images
