"""Checkpoint loading and saving: every supported layout round-trips, bad files fail loudly and never run code."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

import rightreasons as rr
from rightreasons.bcos import LogitLayer
from rightreasons.errors import CheckpointError
from rightreasons.models import load_model, load_weights, read_state_dict, save_model

NAME = "bcos_cifar10_resnet20"


def random_model(**kwargs) -> nn.Module:
    """A small model whose every parameter and buffer is random (so a skipped key cannot go unnoticed)."""
    model = rr.create_model(NAME, **kwargs)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.uniform_(0.5, 1.5)
            else:
                tensor.random_(1, 100)
    return model.eval()


def assert_same_state(model: nn.Module, expected: dict[str, torch.Tensor]) -> None:
    state = model.state_dict()
    assert set(state) == set(expected)
    for key, value in expected.items():
        assert torch.equal(state[key], value), key


@pytest.fixture
def source() -> nn.Module:
    return random_model()


LAYOUTS = {
    "plain": lambda sd: sd,
    "zero_prefix": lambda sd: {f"0.{k}": v for k, v in sd.items()},
    "ddp": lambda sd: {f"module.{k}": v for k, v in sd.items()},
    "lightning": lambda sd: {"epoch": 3, "global_step": 120, "hyper_parameters": {"lr": 1e-3},
                             "state_dict": {f"model.{k}": v for k, v in sd.items()}},
    "lightning_zero_prefix": lambda sd: {"state_dict": {f"model.0.{k}": v for k, v in sd.items()}},
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_torch_files_round_trip_in_every_layout(tmp_path, source, layout):
    path = tmp_path / "weights.pth"
    torch.save(LAYOUTS[layout](source.state_dict()), path)
    assert_same_state(load_weights(rr.create_model(NAME), path), source.state_dict())


def test_sequential_wrapper_layout_as_the_release_writes_it(tmp_path, source):
    path = tmp_path / "release.pth"
    torch.save(nn.Sequential(source, LogitLayer()).state_dict(), path)
    assert_same_state(load_weights(rr.create_model(NAME), path), source.state_dict())


@pytest.mark.parametrize("suffix", [".safetensors", ".bin"])
def test_safetensors_files_are_recognised_by_content(tmp_path, source, suffix):
    path = tmp_path / f"weights{suffix}"
    save_file({f"0.{k}": v.contiguous() for k, v in source.state_dict().items()}, path)
    assert_same_state(load_weights(rr.create_model(NAME), path), source.state_dict())


def test_in_memory_state_dicts_load_too(source):
    assert_same_state(load_weights(rr.create_model(NAME), {"state_dict": source.state_dict()}), source.state_dict())


@pytest.mark.parametrize("ema", [False, True])
def test_lightning_checkpoint_with_ema_weights_picks_the_requested_copy(tmp_path, source, ema):
    averaged = random_model()
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {**{f"model.{k}": v for k, v in source.state_dict().items()},
                               **{f"ema.module.{k}": v for k, v in averaged.state_dict().items()},
                               "ema.n_averaged": torch.tensor(7)}}, path)
    expected = averaged if ema else source
    assert_same_state(load_weights(rr.create_model(NAME), path, ema=ema), expected.state_dict())


# ------------------------------------------------------------------------------------------------ refusals

def test_missing_and_unexpected_keys_are_listed(tmp_path, source):
    state = source.state_dict()
    del state["fc.linear.weight"], state["layer1.0.bn1.running_var"]
    state["head.extra.weight"] = torch.zeros(3)
    path = tmp_path / "partial.pth"
    torch.save(state, path)
    model = rr.create_model(NAME)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError) as info:
        load_weights(model, path)
    message = str(info.value)
    assert str(path) in message
    assert "missing keys (2)" in message and "fc.linear.weight" in message and "layer1.0.bn1.running_var" in message
    assert "unexpected keys (1)" in message and "head.extra.weight" in message
    assert_same_state(model, before)  # nothing was loaded


def test_non_strict_loading_ignores_missing_and_unexpected_keys(source):
    state = source.state_dict()
    del state["fc.linear.weight"]
    state["head.extra.weight"] = torch.zeros(3)
    model = load_weights(rr.create_model(NAME), state, strict=False)
    assert torch.equal(model.state_dict()["conv1.linear.weight"], state["conv1.linear.weight"])


def test_shape_mismatch_names_the_key_and_both_shapes(tmp_path, source):
    state = source.state_dict()
    state["conv1.linear.weight"] = torch.zeros(16, 6, 5, 5)
    expected = r"conv1\.linear\.weight: checkpoint \(16, 6, 5, 5\) vs model \(16, 6, 3, 3\)"
    with pytest.raises(CheckpointError, match=expected):
        load_weights(rr.create_model(NAME), state, strict=False)


class _Payload:
    """Unpickling this object runs ``open(marker, "w")``: a stand-in for arbitrary code in a malicious checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


def test_a_pickle_that_runs_code_is_refused_without_running_it(tmp_path, source):
    marker = tmp_path / "marker"
    path = tmp_path / "evil.pth"
    torch.save({**source.state_dict(), "payload": _Payload(marker)}, path)
    with pytest.raises(CheckpointError, match="refused to load") as info:
        load_weights(rr.create_model(NAME), path)
    assert str(path) in str(info.value)
    assert not marker.exists(), "the payload ran"
    torch.load(path, weights_only=False)  # the control: unrestricted unpickling does run it
    assert marker.exists()


@pytest.mark.parametrize("writer", ["torch", "safetensors"])
def test_a_truncated_file_is_an_error_naming_the_file(tmp_path, source, writer):
    path = tmp_path / f"truncated.{writer}"
    if writer == "torch":
        torch.save(source.state_dict(), path)
    else:
        save_file(source.state_dict(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated") as info:
        load_weights(rr.create_model(NAME), path)
    assert str(path) in str(info.value)


def test_a_file_that_is_not_a_state_dict_is_refused(tmp_path):
    path = tmp_path / "list.pth"
    torch.save([torch.zeros(2)], path)
    with pytest.raises(CheckpointError, match="expected a state dict"):
        read_state_dict(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="nowhere.pth"):
        load_weights(rr.create_model(NAME), tmp_path / "nowhere.pth")


# ----------------------------------------------------------------------------- create_model / save / load

def test_create_model_with_another_class_count_replaces_only_the_classifier(tmp_path, source):
    path = tmp_path / "cifar10.pth"
    torch.save(source.state_dict(), path)
    model = rr.create_model(NAME, checkpoint=path, num_classes=4)
    assert model.fc.linear.weight.shape[0] == 4
    state = model.state_dict()
    for key, value in source.state_dict().items():
        if not key.startswith("fc."):
            assert torch.equal(state[key], value), key


def test_create_model_with_the_default_class_count_loads_strictly(tmp_path):
    path = tmp_path / "four_classes.pth"
    torch.save(random_model(num_classes=4).state_dict(), path)
    expected = r"fc\.linear\.weight: checkpoint \(4, 64, 1, 1\) vs model \(10, 64, 1, 1\)"
    with pytest.raises(CheckpointError, match=expected):
        rr.create_model(NAME, checkpoint=path)


def test_save_model_and_load_model_round_trip(tmp_path):
    model = random_model(num_classes=4, logit_bias=0.0)
    path = save_model(model, tmp_path / "run" / "model.safetensors")
    assert [p.name for p in path.parent.iterdir()] == ["model.safetensors"], "no temporary file is left behind"
    loaded = load_model(path)
    assert loaded.model_args == {"name": NAME, "kwargs": {"num_classes": 4, "logit_bias": 0.0}}
    assert_same_state(loaded, model.state_dict())
    x = torch.rand(2, 6, 16, 16)
    with torch.no_grad():
        assert torch.equal(loaded.eval()(x), model(x))


def test_load_model_refuses_a_file_without_our_metadata(tmp_path, source):
    path = tmp_path / "plain.safetensors"
    save_file(source.state_dict(), path)
    with pytest.raises(CheckpointError, match="not a rightreasons model file"):
        load_model(path)


def test_save_model_needs_a_registry_model(tmp_path):
    with pytest.raises(ValueError, match="create_model"):
        save_model(nn.Linear(2, 2), tmp_path / "linear.safetensors")
    assert not os.listdir(tmp_path)


def test_a_checkpoint_of_another_model_names_it(tmp_path):
    path = save_model(rr.create_model("bcos_cifar10_resnet32"), tmp_path / "resnet32.safetensors")
    expected = r"does not fit the model bcos_cifar10_resnet20 \(the file holds bcos_cifar10_resnet32\)"
    with pytest.raises(CheckpointError, match=expected):
        load_weights(rr.create_model(NAME), path)


def test_ema_requested_from_a_file_without_ema_weights_is_refused():
    model = rr.create_model("bcos_cifar10_resnet20")
    lightning = {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}
    with pytest.raises(CheckpointError, match="ema=True, but the file holds no EMA weights"):
        load_weights(rr.create_model("bcos_cifar10_resnet20"), lightning, ema=True)
