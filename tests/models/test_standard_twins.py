"""Standard (non-B-cos) twins: torchvision/timm layouts and numerics, timm-style interface, and the X-DNN property
that Integrated Gradients with a zero baseline equals Input×Gradient."""

import pytest
import torch
import timm
import torchvision
from captum.attr import IntegratedGradients
from torch import nn

from rightreasons import create_model, list_models, load_weights
from rightreasons.models.registry import get_model_spec

STANDARD = ["resnet18", "resnet34", "resnet50", "xdnn_resnet50", "densenet121", "densenet169",
            "vit_tiny_patch16_224", "vit_small_patch16_224"]


def test_registered_as_standard_models():
    assert set(STANDARD) <= set(list_models(bcos=False))
    assert {get_model_spec(n).family for n in STANDARD} == {"resnet", "densenet", "vit"}


def _shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name, reference", [
    ("resnet18", lambda: torchvision.models.resnet18(num_classes=7)),
    ("resnet34", lambda: torchvision.models.resnet34(num_classes=7)),
    ("resnet50", lambda: torchvision.models.resnet50(num_classes=7)),
    ("densenet121", lambda: torchvision.models.densenet121(num_classes=7)),
    ("densenet169", lambda: torchvision.models.densenet169(num_classes=7)),
    ("vit_tiny_patch16_224", lambda: timm.create_model("vit_tiny_patch16_224", num_classes=7)),
    ("vit_small_patch16_224", lambda: timm.create_model("vit_small_patch16_224", num_classes=7)),
])
def test_key_layout_is_the_library_original(name, reference):
    with torch.device("meta"):  # shapes only, no initialisation cost
        assert _shapes(create_model(name, num_classes=7)) == _shapes(reference())


# Registered names with small depths/widths (the full-size layouts are checked above) and the library original.
SMALL = {
    "resnet18": ({"layers": [1, 1, 1, 1]},
                 lambda: torchvision.models.resnet.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1], 7)),
    "densenet121": ({"growth_rate": 4, "block_config": (1, 1, 1, 1), "num_init_features": 8},
                    lambda: torchvision.models.DenseNet(4, (1, 1, 1, 1), 8, num_classes=7)),
    "vit_tiny_patch16_224": ({"img_size": 32, "depth": 1}, None),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_timm_style_interface_and_original_logits(name):
    kwargs, reference = SMALL[name]
    model = create_model(name, num_classes=7, **kwargs).eval()
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        logits = model(x)
        features = model.forward_features(x)
        assert torch.equal(model.forward_head(features), logits)
        assert model.forward_head(features, pre_logits=True).shape == (1, model.num_features)
        if reference is not None:  # torchvision weights load strictly and give torchvision's logits
            theirs = reference().eval()
            torch.testing.assert_close(load_weights(model, theirs.state_dict())(x), theirs(x), rtol=0, atol=0)
    assert logits.shape == (1, 7) and model.num_classes == 7
    classifier = model.get_classifier()
    assert any(m is classifier for m in model.modules()) and classifier.out_features == 7
    for path in getattr(model, "stage_names", {}).values():
        model.get_submodule(path)  # raises when a stage name does not exist


def test_other_input_channels_and_clear_error():
    model = create_model("resnet18", in_chans=4, num_classes=3, layers=[1, 1, 1, 1]).eval()
    assert model(torch.rand(1, 4, 32, 32)).shape == (1, 3)
    with pytest.raises(ValueError, match="expects 4 input channels"):
        model(torch.rand(1, 3, 32, 32))


def _randomise_norms(model: nn.Module) -> None:
    """Non-trivial eval-mode statistics and affine parameters (the defaults are mean 0, var 1, γ 1, β 0)."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_var.uniform_(0.5, 2.0)
            m.running_mean.normal_(0, 0.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.normal_(0, 0.5)


def test_xdnn_is_bias_and_norm_free_with_the_release_layout():
    with torch.device("meta"):
        model = create_model("xdnn_resnet50")
        reference = torchvision.models.resnet50()
    # the X-DNN release (xfixup_resnet50): torchvision's conv/classifier weights, 1×1 conv shortcuts, nothing else
    convs = {f"{n}.weight".replace("downsample.0.", "downsample.") for n, m in reference.named_modules()
             if isinstance(m, (nn.Conv2d, nn.Linear))}
    assert set(model.state_dict()) == convs
    assert not any(isinstance(m, nn.modules.batchnorm._NormBase) for m in model.modules())
    assert model.fc.bias is None


def test_xdnn_starts_with_fixup_initialisation():
    model = create_model("xdnn_resnet50", layers=[1, 1, 1, 1], num_classes=3)
    assert all(torch.count_nonzero(b.conv3.weight) == 0 for b in model.modules()
               if isinstance(b, torchvision.models.resnet.Bottleneck))
    assert torch.count_nonzero(model.fc.weight) == 0
    expected_std = (2 / (64 * 3 * 3)) ** 0.5 * 4 ** -0.25  # Kaiming (fan-out) × L^(-1/4), L = 4 blocks
    assert model.layer1[0].conv2.weight.std().item() == pytest.approx(expected_std, rel=0.05)


def _integrated_gradients_and_input_x_gradient(model: nn.Module, x: torch.Tensor, target: int):
    ig = IntegratedGradients(model).attribute(x, baselines=torch.zeros_like(x), target=target, n_steps=8,
                                              method="riemann_middle")
    x = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(model(x)[0, target], x)
    return ig, x.detach() * grad


def test_xdnn_integrated_gradients_equal_input_times_gradient():
    """The step count does not matter for a homogeneous network (the gradient is constant along the ray αx); the
    control below shows that the same comparison fails when the network has additive terms."""
    model = create_model("xdnn_resnet50", num_classes=4, layers=[1, 1, 1, 1]).double().eval()
    with torch.no_grad():  # Fixup starts residual branches and classifier at zero: use generic weights instead
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    x = torch.rand(1, 3, 16, 16, dtype=torch.float64)
    with torch.no_grad():  # positively homogeneous: f(0) = 0 and f(αx) = α f(x)
        assert torch.count_nonzero(model(torch.zeros_like(x))) == 0
        torch.testing.assert_close(model(2.5 * x), 2.5 * model(x), rtol=1e-10, atol=1e-12)
    ig, ixg = _integrated_gradients_and_input_x_gradient(model, x, target=2)
    torch.testing.assert_close(ig, ixg, rtol=1e-8, atol=1e-12)
    torch.testing.assert_close(ig.sum(), model(x)[0, 2].detach(), rtol=1e-8, atol=1e-12)  # completeness


def test_network_with_biases_breaks_the_identity():
    """Control: the same check fails for a conventional ResNet (BatchNorm shift), so the test above is sharp."""
    model = create_model("resnet18", num_classes=4, layers=[1, 1, 1, 1]).double().eval()
    with torch.no_grad():
        _randomise_norms(model)
    ig, ixg = _integrated_gradients_and_input_x_gradient(model, torch.rand(1, 3, 16, 16, dtype=torch.float64), 2)
    assert (ig - ixg).abs().max() > 1e-3 * ixg.abs().max()
