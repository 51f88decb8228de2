"""The training recipes: a baseline builds a classifier's config, a guided fine-tuning a guidance config, both
section by section and validated like every config."""

from __future__ import annotations

import pytest

from rightreasons.classification import TrainingRun
from rightreasons.config import to_dict
from rightreasons.errors import ConfigError
from rightreasons.guidance import GuidanceConfig, GuideConfig, GuidedRun


def test_a_training_recipe_expands_to_a_guided_fine_tuning():
    run = GuidedRun(output_dir="runs/energy", checkpoint="runs/base/model.safetensors", annotated_fraction=0.1,
                    guidance=GuidanceConfig(loss="energy", weight=5.0, dilation=0.5))
    config = run.config()
    assert isinstance(config, GuideConfig) and config.guidance.loss == "energy" and config.guidance.dilation == 0.5
    assert config.model.checkpoint == "runs/base/model.safetensors" and config.data.annotated_fraction == 0.1
    assert not hasattr(TrainingRun(output_dir="b").config(), "guidance")
    assert to_dict(TrainingRun(output_dir="b").config())["optim"]["schedule"] == "cosine"


def test_a_recipe_built_in_code_is_validated_like_a_config_file():
    """Sections built in code are checked as a YAML file would be: types, literals and ranges, named by key."""
    with pytest.raises(ConfigError, match=r"guidance\.loss: 'lasso' is not one of"):
        GuidedRun(output_dir="o", guidance=GuidanceConfig(loss="lasso")).config()
    with pytest.raises(ConfigError, match=r"optim\.lr: expected a learning rate in \(0, 100\]"):
        TrainingRun(output_dir="o", lr=0.0).config()
    with pytest.raises(ConfigError, match=r"model\.name: unknown model 'bcos_resnet81'"):
        TrainingRun(output_dir="o", model="bcos_resnet81").config()
    with pytest.raises(ConfigError, match=r"data\.image_size: expected an integer"):
        TrainingRun(output_dir="o", image_size="64").config()
    assert TrainingRun(output_dir="o", lr=1).config().optim.lr == 1.0  # an int where a float belongs, as in YAML
