"""Holistic B-cos ViTs: completeness with attention priors (dynamic linear), affinity with an embedding, the prior
formulas, hybrid tokenisers cut from B-cos CNNs (ResNet, DenseNet-121 after 13/38/87 conv layers), bad input.

Gradient checks through attention (priors included) live with the other ViT gradient checks in ``test_vit.py``.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor

from rightreasons import create_model, list_models, load_model, load_weights, save_model
from rightreasons.bcos import BcosConv2d, explanation_mode
from rightreasons.bcos.attention import AttentionMixing
from rightreasons.encoding import add_inverse
from rightreasons.errors import CheckpointError
from rightreasons.explain import explain
from rightreasons.models.holistic_vit import BcosHolisticViT

TINY = dict(image_size=32, num_classes=5, dim=32, depth=2, heads=2, mlp_dim=64)
HYBRID_RESNET = dict(backbone="bcos_cifar10_resnet20", backbone_cut="layer2", patch_size=4)  # 16×16 map → 4×4 tokens


def randomise(model: BcosHolisticViT) -> BcosHolisticViT:
    """Non-zero priors and embeddings, non-trivial norm gains, so that none of them is a no-op."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "prior" in name or "pos_embedding" in name:
                p.normal_(0, 0.5)
            elif p.dim() == 1:
                p.uniform_(0.5, 1.5)
    return model


def completeness_gap(model: BcosHolisticViT, x: Tensor) -> Tensor:
    """``|logit − logit_bias − Σ contributions|`` relative to ``|logit − logit_bias|`` per sample, in float64.

    Randomly initialised B-cos networks shrink their signal layer by layer (a deep hybrid's logit is ~1e-4 of its
    contributions' mass), so float32 cancellation alone would blur the check; in float64 exactness shows as ~1e-12.
    """
    model, x = model.double(), x.double()
    e = explain(model, x)
    explained = e.logits.gather(1, e.target[:, None]).squeeze(1) - model.logit_layer.bias
    return (explained - e.maps.sum((1, 2))).abs() / explained.abs()


def images(n: int = 2, size: int = 32) -> Tensor:
    return add_inverse(torch.rand(n, 3, size, size))


@pytest.mark.parametrize("pos", ["multiplicative_prior", "additive_prior"])
def test_attention_priors_keep_the_model_complete(pos):
    model = randomise(BcosHolisticViT(patch_size=8, pos=pos, **TINY)).eval()
    assert not model.is_affine
    assert (completeness_gap(model, images()) < 1e-8).all()


def test_additive_embedding_makes_the_model_affine():
    """Documented: with a learnt additive embedding the contributions miss the embedding's share of the logit."""
    model = randomise(BcosHolisticViT(patch_size=8, pos="embedding", **TINY)).eval()
    assert model.is_affine
    assert (completeness_gap(model, images()) > 1e-3).all()


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_hybrid_resnet_tokeniser_keeps_the_model_complete(train):
    model = randomise(BcosHolisticViT(**HYBRID_RESNET, **TINY)).train(train)
    assert model.tokeniser.grid_size == (4, 4)
    assert (completeness_gap(model, images()) < 1e-8).all()


def test_prior_formulas():
    """Additive: ``softmax(q kᵀ/√d + P)``; multiplicative: ``softmax(q kᵀ/√d) ⊙ softmax(P)``, per head."""
    q, k = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    prior = torch.randn(3, 5, 5)
    logits = q @ k.transpose(-1, -2) / 2.0
    additive = AttentionMixing(4, 3, "additive", 5)
    multiplicative = AttentionMixing(4, 3, "multiplicative", 5)
    with torch.no_grad():
        additive.prior.copy_(prior)
        multiplicative.prior.copy_(prior)
    torch.testing.assert_close(additive.attention(q, k), torch.softmax(logits + prior, -1))
    torch.testing.assert_close(multiplicative.attention(q, k), torch.softmax(logits, -1) * torch.softmax(prior, -1))
    torch.testing.assert_close(AttentionMixing(4, 3).attention(q, k), torch.softmax(logits, -1))


def test_state_dict_layout_of_a_hybrid():
    model = BcosHolisticViT(**HYBRID_RESNET, **TINY)
    state = model.state_dict()
    assert state["transformer.encoder_1.attn.attend.prior"].shape == (2, 16, 16)
    assert state["tokeniser.backbone.conv1.linear.weight"].shape == (16, 6, 3, 3)
    assert state["tokeniser.proj.linear.weight"].shape == (2 * 32, 32, 4, 4)  # MaxOut 2 over layer2's 32 channels
    assert state["transformer.encoder_0.ff.net.linear1.linear.weight"].shape == (2 * 64, 32)
    assert "tokeniser.backbone.layer3.0.conv1.linear.weight" not in state  # the cut drops later layers
    assert "head.linear.weight" in state and not any(k.endswith("pos_embedding") for k in state)


def test_forward_identical_in_explanation_mode_and_after_deepcopy():
    model = randomise(BcosHolisticViT(**HYBRID_RESNET, **TINY)).eval()
    x = images().requires_grad_(True)
    plain = model(x)
    with explanation_mode(model):
        explaining = model(x)
    assert torch.equal(plain, explaining)
    twin = copy.deepcopy(model)
    assert torch.equal(twin(x), plain)


def test_deepcopy_keeps_train_and_eval_modes_of_the_backbone():
    """A frozen (eval-mode) backbone under a training transformer stays so in a copy (EMA, distillation teachers)."""
    model = BcosHolisticViT(**HYBRID_RESNET, **TINY).train()
    model.tokeniser.backbone.eval()
    twin = copy.deepcopy(model)
    assert [m.training for m in twin.modules()] == [m.training for m in model.modules()]
    x = images()
    assert torch.equal(twin.tokeniser.backbone(x)["features"], model.tokeniser.backbone(x)["features"])


def test_load_backbone_state_from_a_full_cnn_checkpoint(tmp_path):
    cnn = create_model("bcos_cifar10_resnet20")
    path = tmp_path / "resnet20.pt"
    torch.save({f"0.{k}": v for k, v in cnn.state_dict().items()}, path)  # a Model-Guidance-style wrapped file
    model = BcosHolisticViT(**HYBRID_RESNET, **TINY)
    model.tokeniser.load_backbone_state(load_weights(create_model("bcos_cifar10_resnet20"), path).state_dict())
    full = cnn.state_dict()
    for k, v in model.tokeniser.backbone.state_dict().items():
        assert torch.equal(v, full[k]), k

    other = tmp_path / "resnet32.pt"
    torch.save(create_model("bcos_cifar10_resnet32").state_dict(), other)
    with pytest.raises(CheckpointError, match="unexpected keys"):  # the full backbone's file is checked strictly
        load_weights(create_model("bcos_cifar10_resnet20"), other)
    with pytest.raises(CheckpointError, match="lacks or mis-shapes"):  # another architecture's state
        model.tokeniser.load_backbone_state(create_model("bcos_resnet18").state_dict())
    with pytest.raises(CheckpointError, match="lacks or mis-shapes"):
        model.tokeniser.load_backbone_state({k: v for k, v in full.items() if not k.startswith("layer2.")})


def test_hybrid_round_trips_through_save_model_and_load_model(tmp_path):
    model = randomise(create_model("bcos_holistic_vit_ti", **HYBRID_RESNET, **TINY)).eval()
    path = save_model(model, tmp_path / "hybrid.safetensors")
    x = images()
    assert torch.equal(load_model(path).eval()(x), model(x))


def test_densenet121_cuts_after_13_38_87_conv_layers():
    """The paper's hybrid tokenisers: DenseNet-121 features after 13, 38 and 87 conv layers, 14×14 tokens at 224 px."""
    if "bcos_densenet121" not in list_models():
        pytest.skip("B-cos DenseNet-121 not registered")
    for layers in (13, 38, 87):
        model = create_model(f"bcos_holistic_vit_ti_densenet121_l{layers}", depth=1)
        convs = sum(isinstance(m, BcosConv2d) for m in model.tokeniser.backbone.modules())
        assert convs == layers
        assert model.tokeniser.grid_size == (14, 14)


def test_hybrid_densenet_tokeniser_keeps_the_model_complete():
    if "bcos_densenet121" not in list_models():
        pytest.skip("B-cos DenseNet-121 not registered")
    model = randomise(BcosHolisticViT(backbone="bcos_densenet121", backbone_cut="features.denseblock1", patch_size=4,
                                      **TINY)).eval()  # 32 px → 8×8 block-1 features → 2×2 tokens
    assert (completeness_gap(model, images()) < 1e-8).all()


@pytest.mark.parametrize("size", [30, 64])
def test_wrong_image_size_names_the_expected_one(size):
    model = BcosHolisticViT(**HYBRID_RESNET, **TINY)
    with pytest.raises(ValueError, match=r"32×32 pixels \(4×4 tokens of 8×8 pixels"):
        model(images(1, size))


@pytest.mark.parametrize("kwargs,message", [
    (dict(pos="rotary"), "unknown pos='rotary'"),
    (dict(backbone="bcos_cifar10_resnet20"), "give backbone and backbone_cut together"),
    (dict(backbone="bcos_cifar10_resnet20", backbone_cut="layer7"), r"no such submodule.*'layer1'"),
    (dict(backbone="bcos_cifar10_resnet20", backbone_cut="layer2", patch_size=5), "multiple of patch_size=5"),
    (dict(backbone="bcos_cifar10_resnet20", backbone_cut="layer2", in_chans=3), "takes 6 input channels"),
])
def test_bad_configuration_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BcosHolisticViT(**{**TINY, "patch_size": 8, **kwargs})
