"""The fixed logit layer ``z / T + b`` travels with our model files; files that do not record it are checked
(issue 14, item 12: a Model-Guidance checkpoint, trained with b = −log(999) on 20 classes, was loaded with our default
−log(19) and its logits silently shifted by +3.96). Class names travel with the files too."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import rightreasons as rr
from rightreasons.errors import CheckpointError
from rightreasons.models.weights import CLASSES_KEY, LOGITS_KEY, METADATA_KEY, LogitBiasWarning

NAME, KWARGS = "bcos_resnet18", {"inplanes": 4}


def _x() -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.rand(2, 3, 32, 32)
    return torch.cat([x, 1 - x], 1)


def _metadata(path) -> dict[str, str]:
    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata())


def _no_warnings(call):
    with warnings.catch_warnings():
        warnings.simplefilter("error", LogitBiasWarning)
        return call()


def test_our_files_store_and_restore_bias_and_temperature(tmp_path):
    model = rr.create_model(NAME, num_classes=20, **KWARGS).eval()
    model.logit_layer.bias, model.logit_layer.temperature = -math.log(999), 2.5  # e.g. set after construction
    path = rr.save_model(model, tmp_path / "m.safetensors")
    assert json.loads(_metadata(path)[LOGITS_KEY]) == {"logit_layer": {"bias": -math.log(999), "temperature": 2.5}}
    loaded = _no_warnings(lambda: rr.load_model(path)).eval()
    assert loaded.logit_layer.bias == -math.log(999) and loaded.logit_layer.temperature == 2.5
    torch.testing.assert_close(loaded(_x()), model(_x()))
    assert rr.create_model(NAME, num_classes=20, **KWARGS).logit_layer.bias == pytest.approx(-math.log(19))
    via_checkpoint = _no_warnings(lambda: rr.create_model(NAME, checkpoint=path, num_classes=20, **KWARGS)).eval()
    torch.testing.assert_close(via_checkpoint(_x()), model(_x()))


def _release_style_file(tmp_path, num_classes: int):
    """A Model-Guidance-style checkpoint: a plain state dict wrapped with ``0.``, no record of the logit layer; and
    the model it came from (trained with the releases' bias −log(999))."""
    source = rr.create_model(NAME, num_classes=num_classes, logit_bias=-math.log(999), **KWARGS).eval()
    path = tmp_path / "guided.pth"
    torch.save({f"0.{k}": v for k, v in source.state_dict().items()}, path)
    return source, path


def test_a_file_without_its_bias_warns_with_the_shift_and_the_remedy(tmp_path):
    source, path = _release_style_file(tmp_path, 20)
    with pytest.warns(LogitBiasWarning, match=r"logits shift by \+3\.96.*logit_bias=-6\.906755") as record:
        shifted = rr.create_model(NAME, checkpoint=path, num_classes=20, **KWARGS).eval()
    assert str(path) in str(record[0].message)
    torch.testing.assert_close(shifted(_x()) - source(_x()), torch.full((2, 20), math.log(999 / 19)))
    exact = _no_warnings(lambda: rr.create_model(NAME, checkpoint=path, num_classes=20, logit_bias=-math.log(999),
                                                 **KWARGS)).eval()
    torch.testing.assert_close(exact(_x()), source(_x()))


def test_no_warning_where_nothing_can_shift(tmp_path):
    _, imagenet = _release_style_file(tmp_path, 1000)
    _no_warnings(lambda: rr.create_model(NAME, checkpoint=imagenet, **KWARGS))  # the default is −log(999)
    # fine-tuning on 20 classes: the classifier (and with it the bias) is new, not the file's
    _no_warnings(lambda: rr.create_model(NAME, checkpoint=imagenet, num_classes=20, **KWARGS))


def test_files_of_ours_from_before_the_record_are_described_by_their_arguments(tmp_path):
    model = rr.create_model(NAME, num_classes=20, **KWARGS)
    path = rr.save_model(model, tmp_path / "old.safetensors")
    with safe_open(str(path), framework="pt") as f:
        state = {k: f.get_tensor(k) for k in f.keys()}
    save_file(state, str(path), metadata={METADATA_KEY: _metadata(path)[METADATA_KEY]})
    loaded = _no_warnings(lambda: rr.load_model(path))
    assert loaded.logit_layer.bias == pytest.approx(-math.log(19))


def test_explicit_arguments_win_over_the_file(tmp_path):
    model = rr.create_model(NAME, num_classes=20, **KWARGS)
    model.logit_layer.bias = 1.0
    path = rr.save_model(model, tmp_path / "m.safetensors")
    chosen = rr.create_model(NAME, checkpoint=path, num_classes=20, logit_bias=-2.0, **KWARGS)
    assert chosen.logit_layer.bias == -2.0


@pytest.mark.parametrize("value, message", [
    ("not json", "malformed 'rightreasons_logit_layers'"),
    (json.dumps({"head": {"bias": 0.0, "temperature": None}}), r"records logit layers \['head'\]"),
    (json.dumps({"logit_layer": {"bias": 0.0, "temperature": -1.0}}), "temperature -1.0 positive"),
])
def test_a_malformed_record_is_refused(tmp_path, value, message):
    model = rr.create_model(NAME, num_classes=20, **KWARGS)
    path = rr.save_model(model, tmp_path / "m.safetensors")
    with safe_open(str(path), framework="pt") as f:
        state = {k: f.get_tensor(k) for k in f.keys()}
    save_file(state, str(path), metadata={**_metadata(path), LOGITS_KEY: value})
    with pytest.raises(CheckpointError, match=message):
        rr.load_model(path)


def test_class_names_travel_with_the_file(tmp_path):
    model = rr.create_model(NAME, num_classes=3, **KWARGS)
    path = rr.save_model(model, tmp_path / "m.safetensors", classes=["cat", "dog", "bird"])
    assert json.loads(_metadata(path)[CLASSES_KEY]) == ["cat", "dog", "bird"]
    loaded = rr.load_model(path)
    assert loaded.classes == ("cat", "dog", "bird") and rr.capabilities(loaded).classes == ("cat", "dog", "bird")
    again = rr.save_model(loaded, tmp_path / "again.safetensors")  # kept when saved again
    assert rr.load_model(again).classes == ("cat", "dog", "bird")
    assert rr.capabilities(rr.create_model(NAME, num_classes=3, **KWARGS)).classes is None
    replaced = rr.create_model(NAME, checkpoint=path, num_classes=5, **KWARGS)  # a new classifier: names do not fit
    assert rr.capabilities(replaced).classes is None
