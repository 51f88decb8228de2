"""Model directories: ``save_pretrained`` / ``from_pretrained`` round-trip a model exactly, also from the layout the
Hub's cache gives a downloaded repository, and refuse what does not fit."""

import json

import pytest
import torch

import rightreasons as rr
from rightreasons.errors import CheckpointError
from rightreasons.explain import explain, save_explanation
from rightreasons.models import model_file
from rightreasons.models.hub import from_pretrained, save_pretrained
from rightreasons.models.preprocessing import InputConfig


@pytest.fixture
def model():
    model = rr.create_model("bcos_cifar10_resnet20", num_classes=3, logit_bias=-1.5).eval()
    model.classes = ("cat", "dog", "bird")
    model.input_config = InputConfig("bcos", 32)
    return model


def test_the_model_comes_back_exactly(tmp_path, model):
    directory = save_pretrained(model, tmp_path / "export")
    assert sorted(p.name for p in directory.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    loaded = from_pretrained(directory).eval()
    x = torch.rand(2, 6, 32, 32)
    assert torch.equal(loaded(x), model(x))
    assert loaded.classes == model.classes and loaded.input_config == model.input_config
    config = json.loads((directory / "config.json").read_text())
    assert config["architecture"] == "bcos_cifar10_resnet20" and config["classes"] == ["cat", "dog", "bird"]
    assert config["input"]["input_size"] == [6, 32, 32] and config["logit_layers"]
    card = (directory / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: rightreasons\n") and "- b-cos" in card


def test_a_hub_cache_repository_and_its_snapshot_load(tmp_path, model):
    repo = tmp_path / "hub" / "models--someone--tiny"
    save_pretrained(model, repo / "snapshots" / "0123abc")
    save_pretrained(rr.create_model("bcos_cifar10_resnet20", num_classes=3), repo / "snapshots" / "old")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")
    x = torch.rand(1, 6, 32, 32)
    for source in (repo, repo / "snapshots" / "0123abc"):
        assert torch.equal(from_pretrained(source).eval()(x), model(x))
    assert model_file(repo) == str(repo / "snapshots" / "0123abc" / "model.safetensors")
    (repo / "refs" / "main").unlink()
    with pytest.raises(CheckpointError, match=r"models--someone--tiny: a Hub cache repository with 2 snapshots"):
        from_pretrained(repo)


def test_a_config_that_contradicts_the_model_file_is_refused(tmp_path, model):
    directory = save_pretrained(model, tmp_path / "export")
    config = json.loads((directory / "config.json").read_text())
    config["classes"] = ["a", "b", "c"]
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"config\.json: 'classes' is \['a', 'b', 'c'\]"):
        from_pretrained(directory)


def test_what_is_not_a_model_directory_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"empty: a directory without model\.safetensors"):
        from_pretrained(tmp_path / "empty")
    with pytest.raises(CheckpointError, match=r"nowhere: not a model directory"):
        from_pretrained(tmp_path / "nowhere")


def test_from_pretrained_returns_the_model_in_evaluation_mode(tmp_path):
    """As the Hub's from_pretrained does: a first forward pass must not update BatchNorm's running statistics."""
    model = rr.create_model("bcos_resnet18", num_classes=2, inplanes=4).eval()
    save_pretrained(model, tmp_path / "m")
    loaded = from_pretrained(tmp_path / "m")
    x = torch.rand(2, 6, 32, 32)
    assert not loaded.training and torch.equal(loaded(x), model(x)) and torch.equal(loaded(x), model(x))


def test_explanation_figures_are_copied_in_and_shown_by_the_card(tmp_path, model):
    """Issue 35, item 2: the card shows explanation figures of example images, drawn by `save_explanation`; a later
    export with fewer figures leaves none of the earlier ones behind, and loading still reads the model file only."""
    x = torch.rand(2, 6, 32, 32)
    figures = [save_explanation(tmp_path / f"figure-{i}.png", x[i], explain(model, x[i:i + 1]).weights[0],
                                title=f"example {i}") for i in range(2)]
    directory = save_pretrained(model, tmp_path / "export", pictures=figures)
    assert sorted(p.name for p in directory.glob("*.png")) == ["explanation-1.png", "explanation-2.png"]
    assert (directory / "explanation-2.png").read_bytes() == figures[1].read_bytes()
    card = (directory / "README.md").read_text()
    assert card.index("## Explanations") < card.index("![explanation 1](explanation-1.png)") < \
        card.index("![explanation 2](explanation-2.png)")
    assert torch.equal(from_pretrained(directory)(x), model(x))
    save_pretrained(model, directory, pictures=figures[1:])
    assert [p.name for p in directory.glob("*.png")] == ["explanation-1.png"]
    assert (directory / "explanation-1.png").read_bytes() == figures[1].read_bytes()
    assert "explanation-2.png" not in (directory / "README.md").read_text()
