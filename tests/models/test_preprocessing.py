"""A model file records its input (size, encoding, transform) and loading restores it; older files load as before."""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import rightreasons as rr
from rightreasons.data.transforms import base_view
from rightreasons.encoding import encode
from rightreasons.errors import CheckpointError
from rightreasons.models.preprocessing import INPUT_KEY, InputConfig
from rightreasons.models.weights import METADATA_KEY

NAME = "bcos_cifar10_resnet20"


def test_the_input_round_trips_through_a_model_file(tmp_path):
    model = rr.create_model(NAME, num_classes=3)
    view = InputConfig("bcos", 32, crop_pct=0.875, interpolation="bicubic")
    path = rr.save_model(model, tmp_path / "m.safetensors", input_config=view)
    assert rr.load_model(path).input_config == view
    assert rr.load_weights(rr.create_model(NAME, num_classes=3), path).input_config == view
    again = rr.save_model(rr.load_model(path), tmp_path / "again.safetensors")  # carried by the model
    assert rr.load_model(again).input_config == view


def test_the_recorded_entry_follows_timm_pretrained_cfg(tmp_path):
    path = rr.save_model(rr.create_model("resnet18", num_classes=3), tmp_path / "m.safetensors",
                         input_config=InputConfig("normalize", 64))
    with safe_open(str(path), "pt") as f:
        entry = json.loads(f.metadata()[INPUT_KEY])
    assert entry == {"encoding": "normalize", "input_size": [3, 64, 64], "interpolation": "bilinear", "crop_pct": 1.0,
                     "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def test_a_file_written_before_the_entry_loads_without_it(tmp_path):
    path = rr.save_model(rr.create_model(NAME, num_classes=3), tmp_path / "old.safetensors")
    assert not hasattr(rr.load_model(path), "input_config")


@pytest.mark.parametrize("entry, message", [
    ("{not json", "not JSON"),
    (json.dumps({"encoding": "bcos"}), "input_size is missing"),
    (json.dumps({"encoding": "bcos", "input_size": [6, 32, 16]}), "input_size"),
    (json.dumps({"encoding": "rgb", "input_size": [3, 32, 32]}), "encoding 'rgb'"),
    (json.dumps({"encoding": "bcos", "input_size": [6, 32, 32], "crop_pct": 2}), "crop_pct"),
    (json.dumps({"encoding": "bcos", "input_size": [6, 32, 32], "mean": [0.5, 0.5, 0.5]}), "mean"),
])
def test_a_malformed_entry_is_an_error_naming_file_and_key(tmp_path, entry, message):
    model = rr.create_model(NAME, num_classes=3)
    path = tmp_path / "bad.safetensors"
    save_file(model.state_dict(), str(path), metadata={METADATA_KEY: json.dumps(model.model_args), INPUT_KEY: entry})
    with pytest.raises(CheckpointError, match=rf"bad\.safetensors.*{INPUT_KEY}.*{message}"):
        rr.load_model(path)


def test_transforms_give_the_evaluation_view_the_trainer_validates_on():
    image = torch.rand(3, 40, 48)
    view = InputConfig("bcos", 32)
    x = view.transforms()(image)
    assert x.shape == (6, 32, 32) == (*view.input_size[:1], 32, 32)
    torch.testing.assert_close(x.as_subclass(torch.Tensor), encode("bcos")(base_view(32, crop_fraction=1.0)(image)))
