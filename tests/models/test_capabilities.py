"""The capability record: the one place that says what a model is, agreeing with the registry for every model, and
what every call site reads (encoding → transforms, stages → layers, B-cos → explanation methods)."""

from __future__ import annotations

import functools
import re
import typing

import pytest
import torch
import torchvision
from torch import nn

import rightreasons
from rightreasons.data import make_sample, transforms_for
from rightreasons.config import convert_arguments, from_dict
from rightreasons.classification import ModelConfig
from rightreasons.errors import ConfigError, UnknownNameError, UsageError
from rightreasons.models import GUIDANCE_LAYERS, capabilities, get_model_spec, unwrap_model


@pytest.mark.parametrize("name", rightreasons.list_models())
def test_every_registered_model_has_a_record_that_agrees_with_the_registry(name):
    with torch.device("meta"):  # no arithmetic: every architecture builds in milliseconds
        model = rightreasons.create_model(name)
    caps = capabilities(model)
    spec = get_model_spec(name)
    assert caps.name == name
    assert caps.bcos == spec.bcos
    assert caps.encoding == ("bcos" if spec.bcos else "normalize")
    assert caps.in_chans in (None, 6 if spec.bcos else 3)
    assert caps.num_classes == spec.defaults.get("num_classes", 1000)
    assert caps.xdnn == name.startswith("xdnn_")
    assert set(caps.stages) <= set(GUIDANCE_LAYERS) - {"input"}
    if spec.family in ("resnet", "densenet", "vgg", "convnext"):
        assert set(caps.stages) == {"mid1", "mid2", "mid3", "final"}
    for path in caps.stages.values():
        model.get_submodule(path)


def test_affine_models_say_so():
    assert capabilities(rightreasons.create_model("bcos_simple_vit_ti_patch16_224", image_size=32, patch_size=8,
                                                  depth=1)).affine
    kwargs = {"image_size": 32, "patch_size": 8, "depth": 1}
    assert capabilities(rightreasons.create_model("bcos_holistic_vit_ti", pos="embedding", **kwargs)).affine
    assert not capabilities(rightreasons.create_model("bcos_holistic_vit_ti", **kwargs)).affine
    assert not capabilities(rightreasons.create_model("bcos_resnet18", inplanes=8)).affine


def test_foreign_models_are_read_off_their_structure():
    plain = torchvision.models.resnet18(num_classes=7)
    caps = capabilities(plain)
    assert (caps.name, caps.bcos, caps.encoding, caps.num_classes) == ("ResNet", False, "normalize", 7)
    assert caps.stages["mid2"] == "layer2" and caps.stages["final"] == "layer4"
    assert capabilities(torchvision.models.densenet121()).stages["final"] == "features.norm5"
    assert capabilities(nn.Sequential(nn.Flatten(), nn.Linear(3, 2))).stages == {}


def test_wrappers_are_looked_through():
    model = rightreasons.create_model("bcos_resnet18", num_classes=3, inplanes=8)
    wrapped = torch.compile(nn.DataParallel(nn.DataParallel(model)), backend="eager")
    assert unwrap_model(wrapped) is model
    assert capabilities(wrapped) == capabilities(model)


def test_transforms_for_end_in_the_model_s_encoding():
    sample = make_sample(torch.rand(3, 40, 48), torch.tensor([1.0, 0.0]), torch.tensor([[4.0, 4.0, 20.0, 30.0]]),
                         torch.tensor([0]), has_boxes=True, id="a")
    bcos = transforms_for(rightreasons.create_model("bcos_resnet18", inplanes=8), 32)(sample)["image"]
    assert bcos.shape == (6, 32, 32) and torch.allclose(bcos[:3] + bcos[3:], torch.ones(3, 32, 32))
    standard = transforms_for(rightreasons.create_model("resnet18"), 32)(sample)["image"]
    assert standard.shape == (3, 32, 32) and standard.min() < 0  # mean/std normalised


def test_registry_errors_name_what_exists():
    with pytest.raises(UnknownNameError, match="did you mean bcos_resnet18"):
        rightreasons.create_model("bcos_resnet81")
    with pytest.raises(UsageError, match="invalid constructor arguments.*inplanse"):
        rightreasons.create_model("bcos_resnet18", inplanse=8)
    with pytest.raises(UsageError, match="num_classes must be >= 1"):
        rightreasons.create_model("bcos_resnet18", num_classes=0)


@pytest.mark.parametrize("kwargs, message", [
    ({"b": "nan"}, "b: expected a number, got 'nan' (str)"),
    ({"b": float("nan")}, "b: expected a finite number"),
    ({"inplanes": 8.5}, "inplanes: expected an integer, got 8.5"),
    ({"small_inputs": 1}, "small_inputs: expected true or false"),
    ({"logit_bias": "zero"}, "logit_bias: expected float | null, got 'zero'"),
])
def test_a_config_checks_constructor_arguments_against_their_annotations(kwargs, message):
    """By the rules of every config value (:func:`rightreasons.config.convert_arguments`), when the config is read."""
    with pytest.raises(ConfigError, match=re.escape(f"kwargs: bcos_resnet18: {message}")):
        from_dict(ModelConfig, {"name": "bcos_resnet18", "kwargs": kwargs})


def test_constructor_arguments_are_converted_as_config_values_and_callables_are_left_to_the_constructor():
    config = from_dict(ModelConfig, {"name": "bcos_resnet18", "kwargs": {"b": 2, "inplanes": 8, "logit_bias": None}})
    assert config.kwargs == {"b": 2.0, "inplanes": 8, "logit_bias": None} and isinstance(config.kwargs["b"], float)
    assert convert_arguments(get_model_spec("bcos_resnet18").builder, {"norm_layer": 3}) == {"norm_layer": 3}


def test_the_annotations_of_every_registered_builder_resolve():
    """Otherwise its arguments would silently go unchecked. B-cosified builders forward the source model's arguments
    (checked when the source is built); timm's ViTs take ``**kwargs`` (timm checks them, as a UsageError)."""
    unchecked = []
    for name in rightreasons.list_models():
        builder = get_model_spec(name).builder
        target = builder.func if isinstance(builder, functools.partial) else builder
        hints = typing.get_type_hints(target.__init__ if isinstance(target, type) else target)
        if not any(t in (int, float) for t in hints.values()):
            unchecked.append(name)
    assert all(n.startswith("vit_") for n in unchecked), unchecked
    with torch.device("meta"), pytest.raises(UsageError, match="timm's vit_tiny_patch16_224 refuses"):
        rightreasons.create_model("vit_tiny_patch16_224", num_classes="ten")


@pytest.mark.parametrize("kwargs, message", [
    ({"in_chans": 0}, "in_chans must be >= 1"), ({"inplanes": 0}, "inplanes must be >= 1"),
    ({"stochastic_depth_prob": 2.0}, r"stochastic_depth_prob must be in \[0, 1\)"),
])
def test_out_of_range_widths_are_refused_when_building_not_at_the_first_forward(kwargs, message):
    with pytest.raises(UsageError, match=message):
        rightreasons.create_model("bcos_resnet18", **kwargs)
