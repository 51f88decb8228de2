"""The training recipes: a baseline builds a classifier's config, a guided fine-tuning a guidance config, both
section by section and validated like every config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

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


STUDY = {"recipe": {"model_kwargs": {"inplanes": 4}, "batch_size": 8, "baseline_epochs": 1, "guided_epochs": 1,
                    "train_images": 24, "test_images": 16, "min_annotated_per_batch": 2},
         "seeds": 1, "correlation": [1.0], "difficulty": [0.5], "image_size": [32], "annotated_fraction": [1.0],
         "methods": [{"name": "boxes", "loss": "energy", "weight": 5.0},
                     {"name": "masks", "loss": "energy", "weight": 5.0, "regions": "masks", "point_radius": 3.0},
                     {"name": "points", "loss": "energy", "weight": 5.0, "regions": "points", "point_radius": 4.0}]}


@pytest.fixture(scope="module")
def study_seed(tmp_path_factory) -> Path:
    """The folder of seed 0 of :data:`STUDY`, run once on one thread (results depend on the thread count)."""
    from rightreasons.config import from_dict
    from rightreasons.guidance.study import GuidanceStudy, run_study

    out = tmp_path_factory.mktemp("regions-study")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_study(from_dict(GuidanceStudy, STUDY), out)
    finally:
        torch.set_num_threads(threads)
    return out / "corr1-diff0.5-data0-32px" / "seed-0"


def test_a_study_method_guides_its_fine_tuning_with_the_regions_it_names(study_seed):
    """A guided method's ``regions`` used to be missing (every study method guided with boxes): the fine-tuning of a
    ``regions: masks`` method trains with mask regions (its written config says so) and learns other weights than
    the same fine-tuning with boxes — same seed, same annotated images, same baseline — so the masks reach the loss."""
    from safetensors.torch import load_file

    folder = study_seed
    configs = {name: json.loads((folder / f"{name}-boxes1" / "summary.json").read_text())["config"]
               for name in ("boxes", "masks")}
    assert configs["masks"]["guidance"]["regions"] == "masks" and configs["masks"]["guidance"]["point_radius"] == 3.0
    assert configs["boxes"]["guidance"]["regions"] == "boxes"
    assert {k: v for k, v in configs["masks"]["guidance"].items() if k not in ("regions", "point_radius")} == \
        {k: v for k, v in configs["boxes"]["guidance"].items() if k not in ("regions", "point_radius")}
    weights = {name: load_file(folder / f"{name}-boxes1" / "model.safetensors") for name in ("boxes", "masks")}
    assert any(not torch.equal(weights["boxes"][k], weights["masks"][k]) for k in weights["boxes"])


def test_a_study_method_guides_with_points_on_synthetic_birds_and_its_regions_are_never_empty(study_seed):
    """synthetic-birds draws one click per object, so ``regions: points`` guides: every training image's region is a
    disc on its object (never empty, never the whole box), the fine-tuning's localisation term is positive at every
    logged step (an image without a region adds 0 to it) and it learns other weights than box or mask guidance."""
    from safetensors.torch import load_file

    from rightreasons.data import collate, eval_transform, load_dataset
    from rightreasons.regions import batch_regions

    train = load_dataset("synthetic-birds", None, "train", n=24, size=32, seed=0, difficulty=0.5, correlation=1.0,
                         transform=eval_transform(32, crop_fraction=1.0, encoding="none"))
    batch = collate([train[i] for i in range(len(train))])
    discs = batch_regions("points", batch, batch["labels"].argmax(1), radius=4.0).inside
    on_object = torch.stack([m == k + 1 for m, k in zip(batch["mask"], batch["labels"].argmax(1))])
    area = discs.flatten(1).sum(1)
    assert (area >= 13).all() and (area < on_object.flatten(1).sum(1) + 30).all()
    assert (discs & on_object).flatten(1).sum(1).float().div(area).mean() > 0.9  # nearly all on the object
    run = study_seed / "points-boxes1"
    config = json.loads((run / "summary.json").read_text())["config"]
    assert config["guidance"]["regions"] == "points" and config["guidance"]["point_radius"] == 4.0
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in logged if r["split"] == "train"]
    assert steps and all(r["localization"] > 0 for r in steps)
    weights = {name: load_file(run.parent / f"{name}-boxes1" / "model.safetensors") for name in ("boxes", "masks",
                                                                                               "points")}
    for other in ("boxes", "masks"):
        assert any(not torch.equal(weights["points"][k], weights[other][k]) for k in weights["points"])


@pytest.mark.parametrize("method, named", [
    ({"regions": "discs"}, r"methods\[0\]\.regions: 'discs' is not one of 'boxes' \| 'masks'"),
    ({"point_radius": -1.0}, r"methods\[0\]\.point_radius: expected a radius >= 0"),
])
def test_a_study_method_refuses_regions_it_cannot_guide_with(method, named):
    """A region kind that is not one, or a negative point radius, is refused before any training, named by key;
    every kind synthetic-birds holds (boxes, masks and, since it draws one click per object, points) is taken."""
    from rightreasons.config import from_dict
    from rightreasons.guidance.study import GuidanceStudy

    with pytest.raises(ConfigError, match=named):
        from_dict(GuidanceStudy, {**STUDY, "methods": [{"name": "m", "loss": "energy", "weight": 1.0, **method}]})
    for regions in ("union", "points"):
        assert from_dict(GuidanceStudy, {**STUDY, "methods": [{"name": "m", "loss": "energy", "weight": 1.0,
                                                               "regions": regions}]}).methods[0].regions == regions
