"""The paper configs in configs/guidance: every base file and every run of every grid is a valid config of its
command with the thesis' settings (docs/science.md, model guidance). Only parsing: the real datasets are not needed."""

from pathlib import Path

import pytest

from rightreasons.apps import sweep
from rightreasons.apps.cli.prepare import DEFAULT_ROOTS
from rightreasons.config import load_config
from rightreasons.classification import ClassificationConfig
from rightreasons.guidance import GuideConfig
from rightreasons.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "guidance"
BASES = sorted(CONFIGS.glob("*.yaml"))
GRIDS = sorted((CONFIGS / "grids").glob("*.yaml"))


DATASETS = ("voc2007", "coco2014", "waterbirds100")


def test_there_is_a_baseline_and_a_guided_config_per_dataset_and_the_grids():
    assert {p.stem for p in BASES} == {*DATASETS, *(f"{d}_baseline" for d in DATASETS)}
    assert {p.stem for p in GRIDS} == {"baselines", "guidance", "limited", "dilated", "waterbirds"}


@pytest.mark.parametrize("path", BASES, ids=lambda p: p.stem)
def test_base_configs_load_with_the_thesis_settings(path):
    config = load_config(ClassificationConfig if path.stem.endswith("_baseline") else GuideConfig, path)
    assert config.model.name == "bcos_resnet50"
    assert config.optim.name == "adam" and config.optim.schedule == "constant"
    assert config.data.image_size == 224 and config.data.batch_size == 64
    if not path.stem.endswith("_baseline"):
        assert config.guidance.method == "bcos"
        assert config.guidance.reduction == "sum"  # the thesis' λ values assume a sum over the batch
    expected = {"voc2007": (1e-4, 50), "coco2014": (1e-4, 10), "waterbirds100": (1e-5, 350),
                "voc2007_baseline": (1e-4, 300), "coco2014_baseline": (1e-4, 60),
                "waterbirds100_baseline": (1e-5, 350)}[path.stem]
    assert (config.optim.lr, config.optim.epochs) == expected


@pytest.mark.parametrize("dataset", DATASETS)
def test_the_configs_of_a_dataset_chain_by_run_directory_from_imagenet_weights(dataset):
    """The baseline starts from the published ImageNet B-cos weights; VOC's and COCO's guided runs start from the
    directory the baseline writes (Waterbirds' from the ImageNet weights, as the thesis); the data lies where
    `rightreasons prepare` looks by default."""
    baseline = load_config(ClassificationConfig, CONFIGS / f"{dataset}_baseline.yaml")
    guided = load_config(GuideConfig, CONFIGS / f"{dataset}.yaml")
    assert baseline.model.pretrained and baseline.model.checkpoint is None
    assert baseline.output_dir == f"runs/{dataset}/baseline" and guided.output_dir == f"runs/{dataset}/guided"
    if dataset == "waterbirds100":
        assert guided.model.pretrained and guided.model.checkpoint is None
    else:
        assert not guided.model.pretrained and guided.model.checkpoint == baseline.output_dir
    assert baseline.data.name == guided.data.name == dataset
    assert baseline.data.root == guided.data.root == DEFAULT_ROOTS[dataset]
    assert not any(".safetensors" in str(c.model.checkpoint) for c in (baseline, guided))


def test_waterbirds_base_uses_one_percent_of_the_boxes_and_lambda_5e_2():
    config = load_config(GuideConfig, CONFIGS / "waterbirds100.yaml")
    assert config.data.annotated_fraction == 0.01 and config.guidance.weight == 5e-2
    assert config.data.augment and config.model.pretrained and config.data.options["task"] == "conventional"


def _runs(stem):
    runs = sweep.load_grid(CONFIGS / "grids" / f"{stem}.yaml")
    return runs, [run.config for run in runs]


@pytest.mark.parametrize("path", GRIDS, ids=lambda p: p.stem)
def test_every_run_of_every_grid_is_a_valid_config(path):
    runs = sweep.load_grid(path)
    assert runs and len({r.output_dir for r in runs}) == len(runs)
    for run in runs:
        config = run.config
        assert config.output_dir == str(run.output_dir)
        assert isinstance(config, GuideConfig) == (run.command == "guide")


def _weights(configs, **where):
    chosen = [c for c in configs if all(_get(c, k) == v for k, v in where.items())]
    return sorted({c.guidance.weight for c in chosen})


def _get(config, dotted):
    value = config
    for part in dotted.split("."):
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


def test_guidance_grid_has_table_d2():
    runs, configs = _runs("guidance")
    assert len(runs) == 2 * 2 * 4 * 3  # datasets × layers × losses × λ
    table = {"energy": [5e-4, 1e-3, 5e-3], "l1": [1e-3, 5e-3, 1e-2], "ppce": [1e-4, 5e-4, 1e-3],
             "rrr": [5e-6, 1e-5, 5e-5]}
    for dataset in ("voc2007", "coco2014"):
        for layer in ("input", "final"):
            for loss, weights in table.items():
                assert _weights(configs, **{"data.name": dataset, "guidance.layer": layer,
                                            "guidance.loss": loss}) == weights
    assert {c.optim.epochs for c in configs if c.data.name == "coco2014"} == {10}


def test_limited_grid_has_table_d3():
    runs, configs = _runs("limited")
    assert {c.data.annotated_fraction for c in configs} == {0.01, 0.1}
    for fraction in (0.01, 0.1):
        assert _weights(configs, **{"data.annotated_fraction": fraction, "guidance.loss": "energy"}) == [0.05, 0.1, 0.5]
        assert _weights(configs, **{"data.annotated_fraction": fraction, "guidance.loss": "l1"}) == [0.01, 0.1, 1.0]


def test_dilated_grid_dilates_training_boxes_at_the_input():
    runs, configs = _runs("dilated")
    assert {c.guidance.dilation for c in configs} == {0.1, 0.25, 0.5}
    assert {c.guidance.layer for c in configs} == {"input"} and {c.guidance.loss for c in configs} == {"energy", "l1"}


def test_baselines_grid_trains_without_guidance_at_three_learning_rates():
    runs, configs = _runs("baselines")
    assert {r.command for r in runs} == {"train"}
    assert all(c.model.pretrained and c.model.checkpoint is None for c in configs)
    epochs = {c.data.name: c.optim.epochs for c in configs}
    assert epochs == {"voc2007": 300, "coco2014": 60}
    assert sorted({c.optim.lr for c in configs}) == [1e-5, 1e-4, 1e-3]


def test_waterbirds_grid_covers_both_tasks_losses_and_layers():
    runs, configs = _runs("waterbirds")
    guided = [(c.data.options["task"], c.guidance.loss, c.guidance.layer) for r, c in zip(runs, configs)
              if r.command == "guide"]
    assert len(guided) == 2 * 2 * 2 * 4 and len(set(guided)) == 8
    assert sum(r.command == "train" for r in runs) == 4


def test_a_misspelt_key_in_a_grid_names_the_key(tmp_path):
    grid = tmp_path / "bad.yaml"
    grid.write_text(f"command: guide\nbase: {CONFIGS / 'voc2007.yaml'}\nname: x{{guidance.weight}}\ngroup: g\n"
                    "grid:\n  - guidance.wieght: [1.0e-3]\n")
    with pytest.raises(ConfigError, match="wieght"):
        sweep.load_grid(grid)


@pytest.mark.parametrize("text, message", [
    ("command: guide\nbase: B\nname: n\ngroup: g\ngrid: []\n", "non-empty list"),
    ("command: guide\nbase: B\nname: n\ngroup: g\ngrids:\n  - {seed: 1}\n", "unknown key"),
    ("command: fit\nbase: B\nname: n{seed}\ngroup: g\ngrid:\n  - {seed: [1]}\n", "not one of"),
    ("command: guide\nbase: B\ngroup: g\ngrid:\n  - {seed: [1]}\n", "no \\['name'\\]"),
    ("command: guide\nbase: B\nname: n\ngroup: g\ngrid:\n  - {seed: [1, 2]}\n", "two runs write"),
    ("command: guide\nbase: B\nname: n{nope}\ngroup: g\ngrid:\n  - {seed: [1]}\n", "nope"),
    ("command: guide\nbase: B\nname: n{seed}\ngroup: g\ngrid:\n  - {seed: [1], d: {a: {seed: 2}}}\n", "two axes"),
])
def test_malformed_grids_fail_with_a_clear_message(tmp_path, text, message):
    grid = tmp_path / "grid.yaml"
    grid.write_text(text.replace("base: B", f"base: {CONFIGS / 'voc2007.yaml'}"))
    with pytest.raises(sweep.GridError, match=message):
        sweep.load_grid(grid)
