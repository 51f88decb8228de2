"""The B-cosification configs parse with the recipe's settings and name registered B-cosified models (only parsing:
the datasets and weights are not needed)."""

from pathlib import Path

import pytest

from rightreasons import list_models
from rightreasons.config import load_config
from rightreasons.classification import ClassificationConfig
from rightreasons.errors import ConfigError
from rightreasons.distill import DistillConfig
from rightreasons.guidance import GuideConfig

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "bcosify"
FINE_TUNING = sorted(CONFIGS.glob("imagenet_*.yaml"))


def test_there_is_a_config_per_step():
    assert {p.stem for p in CONFIGS.glob("*.yaml")} == {"imagenet_resnet50", "imagenet_densenet121",
                                                        "imagenet_simple_vit_s", "waterbirds_guided",
                                                        "waterbirds_e2kd"}


@pytest.mark.parametrize("path", FINE_TUNING, ids=lambda p: p.stem)
def test_fine_tuning_follows_the_recipe(path):
    config = load_config(ClassificationConfig, path)
    assert config.model.name in list_models("bcosified_*") and config.model.checkpoint
    assert config.loss.classification == "bce" and config.loss.uniform_off_labels
    assert config.optim.schedule == "cosine" and config.optim.epochs == 90 and config.optim.agc == 0.01
    assert config.optim.weight_decay == 0.0 and config.optim.b_ramp_epochs == 0
    cnn = "vit" not in path.stem
    assert (config.optim.name, config.optim.lr, config.data.batch_size) == \
        (("adamw", 1e-4, 256) if cnn else ("adam", 1e-3, 128))


def test_the_b_ramp_is_one_override_and_validated():
    path = CONFIGS / "imagenet_resnet50.yaml"
    assert load_config(ClassificationConfig, path, ["optim.b_ramp_epochs=1"]).optim.b_ramp_epochs == 1
    with pytest.raises(ConfigError, match="optim.b_ramp_epochs"):
        load_config(ClassificationConfig, path, ["optim.b_ramp_epochs=-1"])


def test_guidance_and_e2kd_start_from_bcosified_models():
    guided = load_config(GuideConfig, CONFIGS / "waterbirds_guided.yaml")
    assert guided.guidance.loss == "energy" and guided.model.name == "bcosified_resnet50"
    distill = load_config(DistillConfig, CONFIGS / "waterbirds_e2kd.yaml")
    assert distill.teacher.checkpoint == guided.output_dir + "/model.safetensors"
    assert distill.distill.explanation_weight == 5.0
