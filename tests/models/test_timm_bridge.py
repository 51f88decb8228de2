"""timm interoperability: our models in timm's registry, timm's names untouched, timm's model interface."""

from pathlib import Path

import pytest
import timm
import torch
from timm.data import resolve_data_config
from torch import nn

import rightreasons
from rightreasons import create_model, list_models
from rightreasons.models import timm_bridge
from rightreasons.models.registry import get_model_spec

# One small configuration per family (constructor arguments override the registered ones), input size.
FAMILY_CASES = {
    ("resnet", True): ("bcos_cifar10_resnet20", {}, 32),
    ("resnet", False): ("xdnn_resnet50", {"layers": [1, 1, 1, 1]}, 32),
    ("densenet", True): ("bcos_densenet121", {"growth_rate": 4, "block_config": (1, 1, 1, 1),
                                              "num_init_features": 8}, 32),
    ("vgg", True): ("bcos_vgg11_bnu", {"hidden_features": 16}, 32),
    ("convnext", True): ("bcos_convnext_atto", {}, 32),
    ("vit", True): ("bcos_simple_vit_ti_patch16_224", {"image_size": 32, "depth": 1}, 32),
    ("vit", False): ("simple_vit_ti_patch16_224", {"image_size": 32, "depth": 1}, 32),
    ("bcosified", True): ("bcosified_resnet18", {"inplanes": 8, "layers": [1, 1, 1, 1]}, 32),
    ("holistic_vit", True): ("bcos_holistic_vit_ti", {"image_size": 32, "depth": 1}, 32),
}


@pytest.fixture(autouse=True, scope="module")
def _timm_registered():
    """``import rightreasons`` leaves timm's registry alone; the models are added to it on request."""
    rightreasons.register_timm_models()


def test_every_model_is_a_timm_model_and_timm_names_keep_timm_definitions():
    assert all(timm.is_model(n) for n in list_models())
    ours = set(timm.list_models(module="timm_bridge"))
    assert {n for n in list_models() if n.startswith(("bcos_", "xdnn_"))} <= ours
    assert not ours & {"resnet50", "densenet121", "vit_tiny_patch16_224"}
    assert type(timm.create_model("resnet18")).__module__ == "timm.models.resnet"
    assert rightreasons.register_timm_models() == []  # idempotent
    assert timm_bridge.register_timm_models() == []


def test_every_family_has_an_interface_case():
    families = {(get_model_spec(n).family, get_model_spec(n).bcos) for n in timm.list_models(module="timm_bridge")}
    assert families <= set(FAMILY_CASES), f"add a small case for {families - set(FAMILY_CASES)}"


@pytest.mark.parametrize("case", sorted(FAMILY_CASES), ids=lambda c: f"{c[0]}-{'bcos' if c[1] else 'standard'}")
def test_timm_create_model_and_interface(case):
    name, kwargs, size = FAMILY_CASES[case]
    if name not in list_models():
        pytest.skip(f"{name} is not registered in this checkout")
    model = timm.create_model(name, num_classes=5, **kwargs).eval()
    assert type(model) is type(create_model(name, num_classes=5, **kwargs))
    x = torch.rand(2, getattr(model, "in_chans", 6), size, size)
    with torch.no_grad():
        logits = model(x)
        features = model.forward_features(x)
        torch.testing.assert_close(model.forward_head(features), logits, rtol=0, atol=0)
        pre_logits = model.forward_head(features, pre_logits=True)
    assert logits.shape == (2, 5) and model.num_classes == 5
    assert pre_logits.shape == (2, getattr(model, "head_hidden_size", model.num_features))  # timm: hidden head width
    classifier = model.get_classifier()
    assert isinstance(classifier, nn.Module) and any(m is classifier for m in model.modules())
    assert model.pretrained_cfg["num_classes"] == 5
    for path in getattr(model, "stage_names", {}).values():
        model.get_submodule(path)


def test_data_config_of_bcos_models_has_no_normalisation():
    config = resolve_data_config(model=timm.create_model("bcos_cifar10_resnet20"))
    assert config["mean"] == (0.0, 0.0, 0.0) and config["std"] == (1.0, 1.0, 1.0)
    release = resolve_data_config(model=timm.create_model("bcos_resnet18"))
    assert release["interpolation"] == "bilinear" and release["crop_pct"] == 0.875  # Resize(256), CenterCrop(224)


def test_released_weights_are_timm_pretrained_tags():
    assert {"bcos_resnet50", "bcos_resnet50.long", "bcos_densenet121.long"} <= set(timm.list_pretrained("bcos_*"))
    with pytest.raises(RuntimeError, match="Invalid pretrained tag"):
        timm.create_model("bcos_cifar10_resnet20.long")


def test_pretrained_tag_selects_the_release_file(monkeypatch):
    calls = {}

    def fake_download(name):
        calls["weights"] = name
        return Path("release.pth")

    def fake_create(name, checkpoint=None, **kwargs):
        calls.update(model=name, checkpoint=checkpoint, kwargs=kwargs)
        return nn.Linear(1, 1)

    monkeypatch.setattr(timm_bridge, "download_pretrained", fake_download)
    monkeypatch.setattr(timm_bridge, "create_model", fake_create)
    timm.create_model("bcos_resnet50.long", pretrained=True, num_classes=3)
    assert calls == {"weights": "bcos_resnet50.long", "model": "bcos_resnet50", "checkpoint": Path("release.pth"),
                     "kwargs": {"num_classes": 3}}


def test_unsupported_timm_options_are_refused():
    with pytest.raises(ValueError, match="cache_dir"):
        timm.create_model("bcos_cifar10_resnet20", cache_dir="/tmp/x")
