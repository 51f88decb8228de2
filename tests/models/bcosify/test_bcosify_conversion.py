"""``rightreasons.bcosify``: what the conversion preserves and what it changes, for every supported family.

* At B = 1 with the biases kept and the max-pool kept, the converted model computes the original's logits on the
  same images (float64, eval mode, non-trivial BatchNorm statistics), for either weight mode.
* The first layer's fold of the mean/std normalisation is exact at every position, the zero-padded borders included;
  a fold that puts the mean into a bias is not (the control).
* With the recipe's defaults (B = 2, no biases) CNNs are dynamic linear: contributions sum to ``logit − logit_bias``
  in train and eval mode. ViTs say they are affine; their
  contributions miss exactly the positional embedding (and class token).
* What cannot be converted is refused with a ``UsageError`` naming it; the original model is never changed.
"""

from __future__ import annotations

import math

import pytest
import timm
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

import rightreasons as rr
from rightreasons.bcos import BcosifiedConv2d, DynamicLinear
from rightreasons.encoding import IMAGENET_MEAN, IMAGENET_STD
from rightreasons.errors import UsageError
from rightreasons.explain import explain
from rightreasons.models.bcosify import fold_normalisation

CNNS = ("resnet18", "resnet50", "torchvision_resnet", "densenet121", "torchvision_densenet")
VITS = ("simple_vit", "vitc", "timm_vit", "timm_vit_avg_qknorm_layerscale")


@pytest.mark.parametrize("weight_mode", ["raw", "gain"])
def test_b1_with_biases_computes_the_original_function(family, weight_mode, standard_model, images, relative_error):
    model = standard_model(family)
    normalised, encoded = images()
    converted = rr.bcosify(model, b=1, keep_bias=True, maxpool_to_avgpool=False, weight_mode=weight_mode)
    assert rr.capabilities(converted).bcos and converted.logit_layer.bias == 0.0
    with torch.no_grad():
        assert relative_error(converted(encoded), model(normalised)) < 1e-10


def test_the_logit_layer_shifts_every_logit_by_the_same_constant(standard_model, images):
    model = standard_model("resnet18")
    normalised, encoded = images()
    shifted = rr.bcosify(model, b=1, keep_bias=True, maxpool_to_avgpool=False, logit_bias=-math.log(4))
    with torch.no_grad():
        torch.testing.assert_close(shifted(encoded) - model(normalised), torch.full((2, 5), -math.log(4),
                                                                                    dtype=torch.float64))
    assert rr.bcosify(model).logit_layer.bias == pytest.approx(-math.log(4))  # −log(C − 1), C = 5 classes


def test_the_first_layer_fold_is_exact_at_every_position_including_the_padded_borders(images):
    conv = nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=False).double()
    normalised, encoded = images(size=9)
    reference = conv(normalised)
    folded = F.conv2d(encoded, fold_normalisation(conv.weight, IMAGENET_MEAN, IMAGENET_STD, dim=1), stride=2,
                      padding=1)
    border = torch.ones_like(reference, dtype=torch.bool)
    border[..., 1:-1, 1:-1] = False  # outputs whose receptive field reads the zero padding
    torch.testing.assert_close(folded[border], reference[border], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(folded, reference, rtol=1e-12, atol=1e-12)
    # control: the mean folded into a bias on raw RGB is right inside, wrong where the padding is read
    mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float64).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=torch.float64).view(1, 3, 1, 1)
    weight = conv.weight / std
    with_bias = F.conv2d(encoded[:, :3], weight, -(weight * mean).sum((1, 2, 3)), stride=2, padding=1)
    torch.testing.assert_close(with_bias[..., 1:-1, 1:-1], reference[..., 1:-1, 1:-1])
    assert (with_bias - reference)[border].abs().max() > 1e-3


@pytest.mark.parametrize("name", ["resnet18", "densenet121", "vitc"])
def test_the_converted_first_layer_reads_the_encoding_like_the_original_reads_normalised_images(name, standard_model,
                                                                                                images):
    model = standard_model(name)
    normalised, encoded = images()
    converted = rr.bcosify(model, b=1, keep_bias=True)
    path = {"resnet18": "conv1", "densenet121": "features.conv0", "vitc": "to_patch_embedding.conv_stem.0"}[name]
    first = converted.get_submodule(path)
    assert isinstance(first, BcosifiedConv2d) and first.linear.in_channels == 6
    with torch.no_grad():
        torch.testing.assert_close(first(encoded), model.get_submodule(path)(normalised), rtol=1e-12, atol=1e-12)


def _complete(model: nn.Module, x: torch.Tensor, relative_error) -> float:
    """Relative error of the contributions' sums against the explained logits (the logit bias is 0: subtracting a
    constant of order 1 from the small raw logits of a freshly converted model would cost their precision)."""
    target = torch.arange(x.shape[0]) % model.num_classes
    e = explain(model, x, target)
    explained = e.logits.gather(1, target[:, None])[:, 0]
    assert model.logit_layer.bias == 0.0 and (explained != 0).all()
    return relative_error(e.maps.sum((1, 2)), explained)


@pytest.mark.parametrize("weight_mode", ["raw", "gain"])
@pytest.mark.parametrize("name", CNNS)
def test_cnns_without_biases_are_complete(name, weight_mode, standard_model, images,
                                                                     relative_error):
    converted = rr.bcosify(standard_model(name), weight_mode=weight_mode, logit_bias=0.0)
    _, encoded = images()
    assert not [n for n, m in converted.named_modules() if isinstance(getattr(m, "bias", None), nn.Parameter)]
    assert isinstance(converted.maxpool if hasattr(converted, "maxpool") else converted.features.pool0, nn.AvgPool2d)
    assert not rr.capabilities(converted).affine
    assert _complete(converted.train(), encoded, relative_error) < 1e-10
    assert _complete(converted.eval(), encoded, relative_error) < 1e-10


@pytest.mark.parametrize("name", VITS)
def test_vits_are_affine_and_complete_up_to_the_positional_embedding(name, standard_model, images, relative_error):
    converted = rr.bcosify(standard_model(name), logit_bias=0.0)
    _, encoded = images()
    assert rr.capabilities(converted).affine
    assert _complete(converted, encoded, relative_error) > 1e-3  # the embedding's share of the logit
    with torch.no_grad():  # without the constant terms the ViT is dynamic linear, its contributions complete
        for name, tensor in [*converted.named_buffers(), *converted.named_parameters()]:
            if name.endswith(("pos_embedding", "pos_embed", "cls_token")):
                tensor.zero_()
    assert _complete(converted, encoded, relative_error) < 1e-10


def test_vit_layers_become_the_layer_kit_s(standard_model):
    converted = rr.bcosify(standard_model("timm_vit"))
    kinds = {type(m).__name__ for m in converted.modules()}
    assert {"BcosifiedLinear", "BcosifiedConv2d", "AttentionMixing", "DynamicGELU", "LayerNorm"} <= kinds
    assert "GELU" not in kinds
    attention = converted.vit.blocks[0].attn
    assert attention.v_bias is None and attention.qk_bias is not None and attention.qkv.bias is None
    assert isinstance(converted.vit.head, rr.bcos.BcosifiedLinear) and converted.vit.head.bias is None


def test_the_original_model_is_left_unchanged(standard_model):
    model = standard_model("resnet18")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rr.bcosify(model)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert not any(isinstance(m, DynamicLinear) for m in model.modules())


def test_plain_torchvision_models_get_the_registered_architecture():
    with torch.device("meta"):
        cases = {
            "bcosified_resnet18": (torchvision.models.resnet18(num_classes=3), {"num_classes": 3}),
            "bcosified_resnet50": (torchvision.models.resnet101(num_classes=3),
                                   {"num_classes": 3, "layers": [3, 4, 23, 3]}),
            "bcosified_densenet169": (torchvision.models.densenet169(num_classes=3), {"num_classes": 3}),
        }
        for name, (model, kwargs) in cases.items():
            converted = rr.bcosify(model, b=1.5)
            assert converted.model_args["name"] == name
            assert converted.model_args["kwargs"] == {**kwargs, "b": 1.5, "keep_bias": False,
                                                      "maxpool_to_avgpool": True, "weight_mode": "raw",
                                                      "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD),
                                                      "logit_bias": None}
            rebuilt = rr.create_model(name, **converted.model_args["kwargs"])
            assert {k: v.shape for k, v in rebuilt.state_dict().items()} == \
                {k: v.shape for k, v in converted.state_dict().items()}


def _silu_resnet() -> nn.Module:
    model = torchvision.models.resnet.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1], num_classes=3)
    model.layer2[0].relu = nn.SiLU()
    return model


@pytest.mark.parametrize("build, message", [
    (lambda: rr.create_model("bcos_resnet18", inplanes=8), "is a B-cos network already"),
    (lambda: rr.create_model("xdnn_resnet50", layers=[1, 1, 1, 1]), "X-DNNs are not supported"),
    (lambda: torchvision.models.convnext_tiny(), "cannot convert a torchvision.models.convnext.ConvNeXt"),
    (_silu_resnet, r"cannot convert layer2.0.relu \(torch.nn.modules.activation.SiLU\)"),
    (lambda: timm.create_model("vit_tiny_patch16_224", global_pool="map", img_size=32, depth=1),
     "attention pooling"),
    (lambda: rr.create_model("resnet18", in_chans=4), "must read 3 colour channels"),
], ids=["bcos", "xdnn", "convnext", "silu", "timm-map-pooling", "four-channels"])
def test_what_cannot_be_converted_is_named(build, message):
    with torch.device("meta"):
        model = build()
    with pytest.raises(UsageError, match=message):
        rr.bcosify(model)


@pytest.mark.parametrize("options, message", [
    ({"b": 0.5}, "b must be a number >= 1"),
    ({"weight_mode": "unit"}, "unknown weight_mode 'unit'"),
    ({"mean": (0.5, 0.5)}, "mean and std need three values"),
    ({"std": (0.2, 0.0, 0.2)}, "std > 0"),
])
def test_invalid_options_are_refused(options, message):
    with torch.device("meta"):
        model = rr.create_model("resnet18")
    with pytest.raises(UsageError, match=message):
        rr.bcosify(model, **options)
