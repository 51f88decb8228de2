"""Attributions at any layer: Captum as referee, B-cos completeness, X-DNN IntGrad, BatchNorm statistics, errors."""

import copy

import pytest
import torch
import torchvision
from captum.attr import (InputXGradient, IntegratedGradients, LayerAttribution, LayerGradCam,
                         LayerGradientXActivation)
from torch import nn
from torchvision.models.convnext import CNBlockConfig, ConvNeXt
from torchvision.models.densenet import DenseNet

from rightreasons import capabilities, create_model
from rightreasons.errors import UnknownNameError, UsageError
from rightreasons.explain import GUIDANCE_LAYERS, attribute, explain, resolve_layer



@pytest.fixture(scope="module")
def resnet18():
    """The registry's standard ResNet-18 twin (torchvision's architecture with ``stage_names``)."""
    torch.manual_seed(0)
    return create_model("resnet18", num_classes=7).eval()


TARGETS = torch.tensor([0, 3, 6])
TV_LAYERS = {"mid1": "layer1", "mid2": "layer2", "mid3": "layer3", "final": "layer4"}


@pytest.mark.parametrize("layer", ["input", "mid1", "mid3", "final"])
def test_ixg_matches_captum(resnet18, layer):
    x = torch.randn(3, 3, 48, 48)
    result = attribute(resnet18, x, TARGETS, "ixg", layer)
    maps, raw = result.maps, result.raw
    if layer == "input":
        expected = InputXGradient(resnet18).attribute(x.clone().requires_grad_(), target=TARGETS)
    else:
        expected = LayerGradientXActivation(resnet18, resnet18.get_submodule(TV_LAYERS[layer])).attribute(
            x, target=TARGETS)
    torch.testing.assert_close(raw, expected.detach().sum(1), rtol=1e-5, atol=1e-7)
    assert maps.shape == (3, 48, 48)


@pytest.mark.parametrize("layer", ["mid2", "final"])
def test_gradcam_matches_captum_layer_gradcam_and_its_upsampling(resnet18, layer):
    x = torch.randn(3, 3, 48, 48)
    result = attribute(resnet18, x, TARGETS, "gradcam", layer)
    maps, raw = result.maps, result.raw
    expected = LayerGradCam(resnet18, resnet18.get_submodule(TV_LAYERS[layer])).attribute(
        x, target=TARGETS, relu_attributions=True).detach()
    torch.testing.assert_close(raw, expected[:, 0], rtol=1e-5, atol=1e-7)
    upsampled = LayerAttribution.interpolate(expected, (48, 48), "bilinear")[:, 0]
    torch.testing.assert_close(maps, upsampled, rtol=1e-5, atol=1e-7)
    assert raw.shape[-1] < 48 and (raw >= 0).all()


def test_intgrad_matches_captum_riemann_right_at_the_input(resnet18):
    """In float64: Captum's alphas are float32-rounded, which in float32 can flip ReLUs near zero."""
    model, x = copy.deepcopy(resnet18).double(), torch.randn(3, 3, 32, 32, dtype=torch.float64)
    ours = attribute(model, x, TARGETS, "intgrad", steps=4).maps
    expected = IntegratedGradients(model).attribute(x, target=TARGETS, n_steps=4, method="riemann_right")
    torch.testing.assert_close(ours, expected.detach().sum(1), rtol=1e-6, atol=1e-12)


def test_intgrad_at_a_layer_integrates_from_a_zero_activation(resnet18):
    """At ``mid3`` IntGrad is Captum's IntegratedGradients of the network's tail on the layer-3 activation."""
    model, x = copy.deepcopy(resnet18).double(), torch.randn(3, 3, 32, 32, dtype=torch.float64)
    raw = attribute(model, x, TARGETS, "intgrad", "mid3", steps=4).raw
    tail = nn.Sequential(model.layer4, model.avgpool, nn.Flatten(), model.fc)
    head = nn.Sequential(*list(model.children())[:7])
    with torch.no_grad():
        activation = head(x)
    expected = IntegratedGradients(tail).attribute(activation, target=TARGETS, n_steps=4, method="riemann_right")
    torch.testing.assert_close(raw, expected.detach().sum(1), rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("layer", GUIDANCE_LAYERS)
def test_bcos_contributions_are_complete_at_every_layer(layer, training, tiny_bcos_resnet, bcos_input):
    """In a bias-free B-cos net the contributions of any layer's activation sum to ``logit − logit_bias``."""
    model = tiny_bcos_resnet().train(training)
    x = bcos_input()
    target = torch.tensor([0, 1, 4, 2])
    result = attribute(model, x, target, "bcos", layer)
    selected = result.logits.gather(1, target[:, None])[:, 0] - model.logit_layer.bias
    torch.testing.assert_close(result.raw.sum((1, 2)), selected, rtol=1e-4, atol=1e-5)
    assert result.maps.shape == (4, 16, 16)


def test_bcos_at_the_input_equals_explain(tiny_bcos_resnet, bcos_input):
    model = tiny_bcos_resnet().eval()
    x = bcos_input()
    target = torch.tensor([3, 1, 0, 2])
    torch.testing.assert_close(attribute(model, x, target, "bcos").maps, explain(model, x, target).maps)


@pytest.mark.parametrize("layer", ["input", "mid2"])
@pytest.mark.parametrize("build", ["tiny", "xdnn_resnet50"])
def test_intgrad_on_an_xdnn_is_exact_input_x_gradient(build, layer, tiny_cnn):
    model = (tiny_cnn(xdnn=True) if build == "tiny" else create_model("xdnn_resnet50", num_classes=5)).eval()
    assert capabilities(model).xdnn
    x = torch.randn(3, 3, 32, 32)
    target = torch.tensor([1, 4, 0])
    ixg = attribute(model, x, target, "ixg", layer).maps
    assert torch.equal(attribute(model, x, target, "intgrad", layer).maps, ixg)
    model.is_xdnn = False  # the Riemann sum: the gradient is constant along the path of a bias-free ReLU net
    riemann = attribute(model, x, target, "intgrad", layer, steps=3).maps
    torch.testing.assert_close(riemann, ixg, rtol=1e-4, atol=1e-6 * ixg.abs().max().item())


@pytest.mark.parametrize("method", ["bcos", "ixg", "gradcam"])
@pytest.mark.parametrize("layer", ["mid2", "final"])
def test_layer_attribution_leaves_batchnorm_statistics_as_a_plain_forward(method, layer, tiny_bcos_resnet, bcos_input,
                                                                          tiny_cnn):
    for make, x in ((tiny_bcos_resnet, bcos_input()), (tiny_cnn, torch.randn(4, 3, 16, 16))):
        if method == "bcos" and make is tiny_cnn:
            continue
        model = make().train()
        reference = copy.deepcopy(model)
        logits = reference(x)
        result = attribute(model, x, torch.tensor([0, 1, 2, 3]), method, layer, create_graph=True)
        assert torch.equal(result.logits, logits)
        for (name, ours), (_, theirs) in zip(model.named_buffers(), reference.named_buffers()):
            assert torch.equal(ours, theirs), name


def test_target_defaults_to_the_prediction_and_results_are_detached(resnet18):
    x = torch.randn(2, 3, 48, 48)
    result = attribute(resnet18, x, None, "gradcam", "final")
    assert torch.equal(result.target, result.logits.argmax(1))
    assert not (result.logits.requires_grad or result.maps.requires_grad or result.raw.requires_grad)


def test_frozen_model_attributes_at_a_layer_inside_no_grad(tiny_cnn):
    model = tiny_cnn().eval().requires_grad_(False)
    with torch.no_grad():
        maps = attribute(model, torch.randn(2, 3, 16, 16), 1, "ixg", "mid2").maps
    assert maps.shape == (2, 16, 16) and maps.abs().sum() > 0


def test_layer_names_resolve_for_every_family(tiny_bcos_resnet, tiny_cnn):
    assert capabilities(tiny_bcos_resnet()).stages == {"mid1": "layer1", "mid2": "layer2", "mid3": "layer3",
                                               "final": "layer3"}
    tiny_convnext = [CNBlockConfig(4, 8, 1), CNBlockConfig(8, 16, 1), CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)]
    for model in (torchvision.models.resnet18(weights=None), ConvNeXt(tiny_convnext),
                  DenseNet(growth_rate=4, block_config=(1, 1, 1, 1), num_init_features=4)):
        names = capabilities(model).stages
        assert list(names) == ["mid1", "mid2", "mid3", "final"]
        assert all(resolve_layer(model, name) is model.get_submodule(path) for name, path in names.items())
    model = tiny_cnn()
    assert resolve_layer(model, "Mid2") is model.stage2 and resolve_layer(model, "input") is None
    assert resolve_layer(model, "stage3.0") is model.stage3[0]


def test_bad_arguments_raise_clear_errors(resnet18, tiny_cnn):
    x = torch.randn(2, 3, 32, 32)
    with pytest.raises(UnknownNameError, match="valid methods"):
        attribute(resnet18, x, 0, "lrp")
    with pytest.raises(UsageError, match="needs a B-cos model"):
        attribute(resnet18, x, 0, "bcos")
    with pytest.raises(UsageError, match=r"'mid1', 'mid2'.*top-level modules"):
        attribute(resnet18, x, 0, "ixg", "layer9")
    with pytest.raises(UsageError, match="ran 2 times"):
        attribute(resnet18, x, 0, "ixg", "layer1.0.relu")
    with pytest.raises(UsageError, match=r"must output a tensor \[N, C, h, w\]"):
        attribute(resnet18, x, 0, "ixg", "fc")
    with pytest.raises(UsageError, match="eval"):
        attribute(tiny_cnn().train(), torch.randn(2, 3, 16, 16), 0, "intgrad", steps=3)
