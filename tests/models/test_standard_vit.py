"""Standard (non-B-cos) Simple ViT and ViT-c of the B-cos v2 release: equal to the ``bcos`` package's ``standard_*``
models in key layout and logits, loadable with ``pretrained=True``, with timm's interface and no B-cos explanations."""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

pytest.importorskip("einops")  # the bcos package's ViTs need it
from bcos.experiments.ImageNet.vit_final.experiment_parameters import CONFIGS as RELEASE_CONFIGS  # noqa: E402
from bcos.models import pretrained as bcos_pretrained  # noqa: E402
from bcos.models.vit import SimpleViT as RefSimpleViT  # noqa: E402

from rightreasons import create_model, list_models, load_weights  # noqa: E402
from rightreasons.bcos.dynamic import DynamicLinear  # noqa: E402
from rightreasons.errors import UsageError  # noqa: E402
from rightreasons.explain import attribute  # noqa: E402
from rightreasons.models.pretrained import PRETRAINED, PretrainedWeights  # noqa: E402
from rightreasons.models.registry import get_model_spec  # noqa: E402
from rightreasons.models.standard import StandardSimpleViT  # noqa: E402

NAMES = [f"{family}_{size}_{suffix}" for family, suffix in (("simple_vit", "patch16_224"), ("vitc", "patch1_14"))
         for size in ("ti", "s", "b", "l")]
TINY = dict(num_classes=5, dim=32, depth=2, heads=2, mlp_dim=64)


def shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def release_standard(name: str) -> nn.Module:
    """The bcos package's standard model ``name`` through its hub entry point ``standard_<name>`` (no weights)."""
    return getattr(bcos_pretrained, f"standard_{name}")()


def release_tiny(image_px: int, patch_size: int, conv_stem: list[int] | None) -> nn.Module:
    """A small bcos-package ViT with the layers of the release's standard experiments (its config's norm, norm2d,
    activation and channels; plain ``nn.Linear``/``nn.Conv2d`` as its ``model.py`` sets for ``is_bcos=False``).

    Its ``image_size`` is the size after the conv stem (the token grid for ViT-c)."""
    args = {k: v for k, v in RELEASE_CONFIGS["vitc_ti_patch1_14"]["model"]["args"].items() if k != "num_classes"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it warns when not built through its hub entry points
        return RefSimpleViT(image_size=image_px, patch_size=patch_size, conv_stem=conv_stem, linear_layer=nn.Linear,
                            conv2d_layer=nn.Conv2d, **args, **TINY)


def randomise_vectors(model: nn.Module) -> nn.Module:
    """Non-trivial norm gains and biases (defaults 1 and 0) so that a wrong bias or norm placement shows."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.uniform_(-0.5, 1.5)
    return model


def assert_same_logits(ours: nn.Module, reference: nn.Module, x: Tensor) -> None:
    with torch.no_grad():
        torch.testing.assert_close(ours.double().eval()(x), reference.double().eval()(x))


def test_registered_as_standard_vits_for_every_release_file():
    assert set(NAMES) <= set(list_models(bcos=False, family="vit"))
    for name in NAMES:
        assert get_model_spec(name).builder is StandardSimpleViT
        assert get_model_spec(f"bcos_{name}").bcos  # the B-cos twin keeps its registration
    standard_weights = [w for key, w in PRETRAINED.items() if not key.startswith("bcos_")]
    assert sorted(w.model for w in standard_weights) == sorted(NAMES)
    assert PRETRAINED["simple_vit_ti_patch16_224"].model in list_models()


@pytest.mark.parametrize("name", NAMES)
def test_key_layout_matches_the_release(name):
    """Keys and shapes of the release's ``standard_<name>`` (built without weights; large sizes on ``meta``)."""
    if "_ti_" in name:
        reference, ours = release_standard(name), create_model(name)
        load_weights(ours, reference.state_dict())  # strict
    else:
        with torch.device("meta"):
            reference, ours = release_standard(name), create_model(name)
    assert shapes(ours) == shapes(reference)
    assert not any(isinstance(m, DynamicLinear) for m in ours.modules())


@pytest.mark.parametrize("patch_size,conv_stem,reference_px", [(8, None, 32), (1, [8, 8, 16], 8)],
                         ids=["simple_vit", "vitc"])
def test_small_model_matches_the_release_in_logits(patch_size, conv_stem, reference_px):
    """Shared random weights (biases and norm parameters included), float64."""
    reference = randomise_vectors(release_tiny(reference_px, patch_size, conv_stem))
    ours = StandardSimpleViT(image_size=32, patch_size=patch_size, conv_stem=conv_stem, **TINY)
    load_weights(ours, reference.state_dict())
    assert_same_logits(ours, reference, torch.randn(3, 3, 32, 32, dtype=torch.float64))


@pytest.mark.parametrize("name", ["simple_vit_ti_patch16_224", "vitc_ti_patch1_14"])
def test_release_file_loads_with_pretrained_true_and_gives_the_release_logits(name, tmp_path, monkeypatch):
    """A release-style file (the bcos package model's state dict) in the hub directory, with its hash in the name."""
    reference = randomise_vectors(release_standard(name))
    source = tmp_path / "weights.pth"
    torch.save(reference.state_dict(), source)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    release = PRETRAINED[name]
    entry = PretrainedWeights(release.model, release.hub_name, release.experiment,
                              f"standard_{name}-{digest[:10]}.pth", release.top1)
    monkeypatch.setitem(PRETRAINED, name, entry)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    hub = Path(torch.hub.get_dir()) / "checkpoints"
    hub.mkdir(parents=True)
    source.rename(hub / entry.file_name)

    ours = create_model(name, pretrained=True)
    assert_same_logits(ours, reference, torch.randn(2, 3, 224, 224, dtype=torch.float64))


@pytest.mark.parametrize("kwargs", [dict(patch_size=8), dict(patch_size=1, conv_stem=[8, 16])],
                         ids=["simple_vit", "vitc"])
def test_timm_style_interface(kwargs):
    model = StandardSimpleViT(image_size=32, **TINY, **kwargs).eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        logits = model(x)
        features = model.forward_features(x)
        assert torch.equal(model.forward_head(features), logits)
        pre_logits = model.forward_head(features, pre_logits=True)
    assert features.shape == (2, (32 // model.to_patch_embedding.stride) ** 2, TINY["dim"])
    assert logits.shape == (2, 5) and model.num_classes == 5 and model.in_chans == 3
    assert pre_logits.shape == (2, model.num_features) and model.num_features == TINY["dim"]
    assert model.get_classifier() is model.linear_head.linear and model.get_classifier().out_features == 5


def test_wrong_channel_count_is_refused_clearly():
    model = create_model("simple_vit_ti_patch16_224", depth=1)
    with pytest.raises(ValueError, match=r"StandardSimpleViT expects 3 input channels, got shape \(1, 6, 224, 224\)"):
        model(torch.rand(1, 6, 224, 224))


def test_bcos_explanations_are_refused():
    model = StandardSimpleViT(image_size=32, patch_size=8, **TINY).eval()
    x = torch.rand(1, 3, 32, 32)
    with pytest.raises(UsageError, match="needs a B-cos model"):
        attribute(model, x, target=0, method="bcos")
    assert attribute(model, x, target=0, method="ixg").maps.shape == (1, 32, 32)
