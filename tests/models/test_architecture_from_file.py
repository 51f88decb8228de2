"""Where a model is expected, a model file of ours supplies its own architecture (issue 25): ``name: null`` takes it,
a name or arguments that differ from it are refused with each differing argument, and other weights files still
need a name."""

from __future__ import annotations

import pytest
import torch

from rightreasons.errors import CheckpointError, UsageError
from rightreasons.models import create_model, recorded_architecture, resolve_architecture, save_model


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "model.safetensors"
    save_model(create_model("bcos_resnet18", inplanes=4, num_classes=3), path)
    return path


def test_a_null_name_takes_the_files_architecture_with_its_classes(model_file):
    assert recorded_architecture(model_file) == ("bcos_resnet18", {"inplanes": 4, "num_classes": 3})
    name, kwargs = resolve_architecture(None, {}, model_file)
    model = create_model(name, checkpoint=model_file, **kwargs)
    assert kwargs == {"inplanes": 4, "num_classes": 3}
    assert model.conv1.linear.weight.shape[0] == 4 and model.fc.linear.weight.shape[0] == 3
    # the same name with the same (or default-equal) arguments is accepted, num_classes is never compared
    assert resolve_architecture("bcos_resnet18", {"inplanes": 4, "num_classes": 7}, model_file) == \
        ("bcos_resnet18", {"inplanes": 4, "num_classes": 7})


def test_a_mismatch_names_each_differing_argument(model_file):
    with pytest.raises(CheckpointError) as info:
        resolve_architecture("bcos_resnet18", {"inplanes": 8}, model_file, "teacher")
    message = str(info.value)
    assert f"teacher.checkpoint={model_file} holds a bcos_resnet18" in message
    assert "inplanes: 4 in the file, 8 in the config" in message and "set teacher.name=null" in message
    with pytest.raises(CheckpointError, match="architecture: bcos_resnet18 in the file, bcos_resnet50 in the config"):
        resolve_architecture("bcos_resnet50", {}, model_file)
    with pytest.raises(CheckpointError, match="inplanes: 4 in the file, 16 in the config"):
        resolve_architecture(None, {"inplanes": 16}, model_file)  # arguments given with a null name are checked too


def test_other_weights_files_need_a_name(tmp_path):
    plain = tmp_path / "plain.pth"
    torch.save(create_model("bcos_resnet18", inplanes=4).state_dict(), plain)
    assert recorded_architecture(plain) is None
    assert resolve_architecture("bcos_resnet18", {"inplanes": 4}, plain) == ("bcos_resnet18", {"inplanes": 4})
    with pytest.raises(UsageError, match=r"model.name is not set and model.checkpoint \(.*plain.pth\) does not record"):
        resolve_architecture(None, {}, plain)
