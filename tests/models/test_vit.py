"""B-cos Simple ViT and ViT-c: equal to the release (``bcos`` package) in logits, explanations and key layout; exact
explanation gradients through attention; fixed image sizes; affinity of the additive positional embedding."""

from __future__ import annotations

import math
import warnings
from functools import partial

import pytest
import torch
from torch import Tensor, nn

pytest.importorskip("einops")  # the bcos package's ViTs need it
from bcos.models import pretrained as bcos_pretrained  # noqa: E402
from bcos.models.vit import SimpleViT as RefSimpleViT  # noqa: E402
from bcos.modules import BcosConv2d as RefBcosConv2d  # noqa: E402
from bcos.modules import BcosLinear as RefBcosLinear  # noqa: E402
from bcos.modules import DetachableGNLayerNorm2d, norms as ref_norms  # noqa: E402
from bcos.modules.common import BcosSequential  # noqa: E402
from bcos.modules.logitlayer import LogitLayer as RefLogitLayer  # noqa: E402

from rightreasons import create_model, load_weights  # noqa: E402
from rightreasons.bcos import explanation_mode  # noqa: E402
from rightreasons.encoding import add_inverse  # noqa: E402
from rightreasons.explain import explain  # noqa: E402
from rightreasons.models.holistic_vit import BcosHolisticViT  # noqa: E402
from rightreasons.models.vit import BcosSimpleViT, sincos_2d_embedding  # noqa: E402

TINY = dict(num_classes=5, dim=32, depth=2, heads=2, mlp_dim=64)


def assert_rel_close(actual: Tensor, expected: Tensor, rel: float) -> None:
    """``max |actual − expected| <= rel · max |expected|``."""
    err = (actual - expected).abs().max().item()
    scale = expected.abs().max().item()
    assert err <= rel * scale, f"max abs error {err:.3g} > {rel:g} × {scale:.3g}"


def reference_vit(stem_output_px: int, patch_size: int, conv_stem: list[int] | None) -> nn.Module:
    """The bcos package's B-cos ViT with the release's settings, wrapped as the release saves it.

    Its ``image_size`` is the size after the conv stem (the token grid for ViT-c), ours the input size.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it warns when not built through its hub entry points
        vit = RefSimpleViT(
            image_size=stem_output_px, patch_size=patch_size,
            channels=6, linear_layer=partial(RefBcosLinear, b=2), conv2d_layer=partial(RefBcosConv2d, b=2),
            norm_layer=ref_norms.NoBias(ref_norms.DetachableLayerNorm),
            norm2d_layer=ref_norms.NoBias(DetachableGNLayerNorm2d), act_layer=nn.Identity, conv_stem=conv_stem, **TINY)
    model = BcosSequential(vit, RefLogitLayer(logit_bias=-math.log(TINY["num_classes"] - 1)))
    with torch.no_grad():  # non-trivial norm gains so that they matter
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    return model.eval()


def reference_explanation(model: nn.Module, x: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    x = x.clone().requires_grad_(True)
    with model.explanation_mode():
        logits = model(x)
        (w,) = torch.autograd.grad(logits.gather(1, target[:, None]).sum(), x)
    return logits.detach(), w


@pytest.mark.parametrize("patch_size,conv_stem,stem_output_px", [(8, None, 32), (1, [8, 8, 16], 8)],
                         ids=["simple_vit", "vitc"])
def test_tiny_vit_matches_the_release_in_logits_and_explanations(patch_size, conv_stem, stem_output_px):
    """Shared random weights (loaded from the release's ``0.``-prefixed state dict), float32, rel tol 1e-5."""
    image_px = 32
    ref = reference_vit(stem_output_px, patch_size, conv_stem)
    ours = BcosSimpleViT(image_size=image_px, patch_size=patch_size, conv_stem=conv_stem, **TINY).eval()
    load_weights(ours, ref.state_dict())
    x = add_inverse(torch.rand(2, 3, image_px, image_px))
    target = torch.tensor([1, 3])

    ref_logits, ref_w = reference_explanation(ref, x, target)
    e = explain(ours, x, target)
    assert_rel_close(e.logits, ref_logits, 1e-5)
    assert_rel_close(e.weights, ref_w, 1e-5)
    assert_rel_close(e.maps, (ref_w * x).sum(1), 1e-5)


@pytest.mark.parametrize("name,reference", [("bcos_simple_vit_ti_patch16_224", "simple_vit_ti_patch16_224"),
                                            ("bcos_vitc_ti_patch1_14", "vitc_ti_patch1_14")])
def test_full_size_key_layout_matches_the_release(name, reference):
    """The release's ``Sequential(vit, logit_layer)`` state dict (``0.`` keys) loads strictly, shapes and all."""
    ref_state = getattr(bcos_pretrained, reference)().state_dict()
    assert all(k.startswith("0.") for k in ref_state)
    ours = create_model(name)
    assert {k[2:]: tuple(v.shape) for k, v in ref_state.items()} == \
        {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    load_weights(ours, ref_state)
    assert torch.equal(ours.state_dict()["transformer.encoder_0.attn.to_qkv.weight"],
                       ref_state["0.transformer.encoder_0.attn.to_qkv.weight"])


def test_positional_embedding_follows_the_formula():
    pe = sincos_2d_embedding(3, 4, 8)  # ω = [1, 1e-4] for dim 8
    row, col = 2, 1  # token 2·4 + 1
    omega = torch.tensor([1.0, 1e-4])
    expected = torch.cat([(col * omega).sin(), (col * omega).cos(), (row * omega).sin(), (row * omega).cos()])
    assert pe.shape == (12, 8)
    torch.testing.assert_close(pe[row * 4 + col], expected)


def test_forward_is_identical_in_and_out_of_explanation_mode():
    model = BcosSimpleViT(image_size=32, patch_size=8, **TINY)
    x = add_inverse(torch.rand(2, 3, 32, 32)).requires_grad_(True)
    plain = model(x)
    with explanation_mode(model):
        explaining = model(x)
    assert torch.equal(plain, explaining)


def test_additive_positional_embedding_makes_the_vit_affine():
    """Documented: contributions miss the embedding's share of the logit, so completeness does not hold."""
    model = BcosSimpleViT(image_size=32, patch_size=8, **TINY).eval()
    assert model.is_affine
    x = add_inverse(torch.rand(2, 3, 32, 32))
    e = explain(model, x)
    explained = e.logits.gather(1, e.target[:, None]).squeeze(1) - model.logit_layer.bias
    gap = (explained - e.maps.sum((1, 2))).abs()
    assert (gap > 1e-3 * explained.abs()).all()


@pytest.mark.parametrize("name,size", [("bcos_simple_vit_ti_patch16_224", 200), ("bcos_simple_vit_ti_patch16_224", 256),
                                       ("bcos_vitc_ti_patch1_14", 240)])
def test_wrong_image_size_names_the_expected_one(name, size):
    model = create_model(name, depth=1)
    with pytest.raises(ValueError, match="224×224"):
        model(torch.rand(1, 6, size, size))


def test_image_size_must_be_a_multiple_of_the_patch_size():
    with pytest.raises(ValueError, match="multiple of the patch size 16"):
        BcosSimpleViT(image_size=100, patch_size=1, conv_stem=[8, 16, 32, 64], **TINY)


def test_three_channel_input_is_refused_with_the_encoding_hint():
    with pytest.raises(ValueError, match="six-channel"):
        BcosSimpleViT(image_size=32, patch_size=8, **TINY)(torch.rand(1, 3, 32, 32))


# --- exact explanation gradients through attention (float64 finite differences) ---

def explanation_loss(model: nn.Module, x: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Share of positive contribution energy inside ``mask`` plus a logit term (as in joint training)."""
    e = explain(model, x, target, create_graph=True)
    positive = e.maps.clamp(min=0)
    return (positive * mask).sum() / positive.sum() + 0.1 * e.logits.gather(1, target[:, None]).sum()


def tiny_models() -> dict[str, nn.Module]:
    small = dict(image_size=8, num_classes=3, dim=8, depth=1, heads=2, mlp_dim=8)
    return {
        "simple_vit": BcosSimpleViT(patch_size=4, **small),
        "vitc": BcosSimpleViT(patch_size=1, conv_stem=[4, 4], **small),
        "holistic_multiplicative": BcosHolisticViT(patch_size=4, pos="multiplicative_prior", **small),
        "holistic_additive": BcosHolisticViT(patch_size=4, pos="additive_prior", **small),
    }


@pytest.mark.parametrize("kind", list(tiny_models()))
def test_explanation_loss_gradient_through_attention_matches_finite_differences(kind):
    """Directional derivatives along a random direction per parameter tensor: autograd vs central differences."""
    model = tiny_models()[kind].double().eval()
    with torch.no_grad():  # move priors and norm gains away from their symmetric initialisation
        for name, p in model.named_parameters():
            if "prior" in name or p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    x = add_inverse(torch.rand(2, 3, 8, 8, dtype=torch.float64))
    target = torch.tensor([0, 2])
    mask = torch.zeros(2, 8, 8, dtype=torch.float64)
    mask[:, 2:6, 1:5] = 1

    params = dict(model.named_parameters())
    grads = torch.autograd.grad(explanation_loss(model, x, target, mask), list(params.values()))
    eps = 1e-6
    analytic, numeric = [], []
    with torch.no_grad():
        for (name, p), g in zip(params.items(), grads):
            direction = torch.randn_like(p)
            p.add_(eps * direction)
            with torch.enable_grad():
                up = explanation_loss(model, x, target, mask)
            p.sub_(2 * eps * direction)
            with torch.enable_grad():
                down = explanation_loss(model, x, target, mask)
            p.add_(eps * direction)
            analytic.append((g * direction).sum())
            numeric.append((up - down) / (2 * eps))
    analytic, numeric = torch.stack(analytic), torch.stack(numeric)
    assert (analytic - numeric).norm() / numeric.norm() < 1e-6
    names = list(params)
    query_key = [i for i, n in enumerate(names) if "to_qkv" in n or "to_qk" in n]
    assert all(numeric[i].abs() > 1e-6 * numeric.norm() for i in query_key)  # the attention path carries gradient
