"""Numerical guards: attributions (every method, at the input and a hidden layer), the four localisation losses, the
classification losses, EPG, IoU and the explanation similarity stay finite — values and gradients with respect to
every parameter — on degenerate inputs and in reduced precision.

Conditions: all-zero inputs (the zero tensor and an encoded black image), constant images (grey, white), saturated
logits (a logit bias of 10⁴ and a temperature of 10⁻⁴, logits ≈ 10⁴), and bf16 / fp16 autocast on CPU.

The batch holds one annotated sample with a box mask and one with an empty mask (an image without boxes of the class).
All loss terms are summed before one backward pass: a finite sum of gradients proves every term's gradient finite (a
non-finite term cannot be cancelled into a finite one).
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
from torch import Tensor, nn

from rightreasons import create_model
from rightreasons.bcos import LogitLayer
from rightreasons.encoding import AddInverse
from rightreasons.explain import MAP_METHOD_NAMES as METHODS
from rightreasons.explain import attribute
from rightreasons.guidance.losses import LOSSES
from rightreasons.metrics import epg, explanation_similarity, iou
from rightreasons.classification.loss import classification_loss

SIZE = 16
LAYERS = ("input", "mid2")
LABELS = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
MASKS = torch.zeros(2, SIZE, SIZE, dtype=torch.bool)
MASKS[0, 4:12, 3:10] = True


def model(saturated: bool = False) -> nn.Module:
    """A B-cos ResNet-20 (3 classes) in eval mode; ``saturated``: logits ≈ 10⁴ through its logit layer."""
    torch.manual_seed(0)
    net = create_model("bcos_cifar10_resnet20", num_classes=3).eval()
    if saturated:
        net.logit_layer = LogitLayer(bias=1e4, temperature=1e-4)
    return net


def encoded(rgb: Tensor) -> Tensor:
    """``[N, 3, H, W]`` in [0, 1] → the six-channel B-cos input ``[N, 6, H, W]``."""
    return torch.stack([AddInverse()(image) for image in rgb])


def loss_terms(net: nn.Module, x: Tensor, method: str, layer: str, losses: tuple[str, ...],
               dtype: torch.dtype | None = None) -> tuple[dict[str, Tensor], Tensor]:
    """Every loss term of one guided / distilled step (under autocast to ``dtype``) and the attribution maps."""
    with torch.autocast("cpu", dtype=dtype) if dtype else nullcontext():
        out = attribute(net, x, LABELS.argmax(1), method, layer, create_graph=True, steps=4)
    maps, logits = out.maps.float(), out.logits.float()
    annotated = torch.ones(2, dtype=torch.bool)  # the sample with an empty mask counts too: its worst case
    terms = {name: LOSSES[name](maps, MASKS, annotated=annotated) for name in losses}
    terms["bce"] = classification_loss(logits, LABELS, "bce")
    terms["ce"] = classification_loss(logits, LABELS, "ce")
    teacher = torch.linspace(-1, 1, SIZE * SIZE).reshape(1, SIZE, SIZE).expand(2, -1, -1)
    terms["explanation similarity"] = (1 - explanation_similarity(teacher, maps)).mean()
    return terms, maps


def assert_finite(net: nn.Module, x: Tensor, method: str, layer: str, losses: tuple[str, ...] = tuple(LOSSES),
                  dtype: torch.dtype | None = None, scale: float = 1.0) -> None:
    terms, maps = loss_terms(net, x, method, layer, losses, dtype)
    where = f"{method} at {layer}" + (f" under {dtype} autocast" if dtype else "")
    assert torch.isfinite(maps).all(), f"{where}: non-finite attributions"
    for name, value in terms.items():
        assert torch.isfinite(value), f"{where}: {name} loss is {value.item()}"
    for name, score in {"epg": epg(maps, MASKS), "iou": iou(maps, MASKS)}.items():
        assert torch.isfinite(score).all() and ((score >= 0) & (score <= 1)).all(), f"{where}: {name} {score}"
    similarity = explanation_similarity(maps, maps.flip(0))
    assert torch.isfinite(similarity).all() and (similarity.abs() <= 1 + 1e-6).all(), f"{where}: {similarity}"
    params = [p for p in net.parameters() if p.requires_grad]
    grads = torch.autograd.grad(scale * sum(terms.values()), params, allow_unused=True)
    bad = [name for (name, _), g in zip(net.named_parameters(), grads) if g is not None and not torch.isfinite(g).all()]
    assert not bad, f"{where}: non-finite gradients for {bad[:5]}"
    assert any(g is not None for g in grads)


@pytest.mark.parametrize("method", METHODS)
def test_all_zero_inputs(method):
    """The zero tensor (every B-cos patch norm is 0) and an encoded black image."""
    net = model()
    for x in (torch.zeros(2, 6, SIZE, SIZE), encoded(torch.zeros(2, 3, SIZE, SIZE))):
        for layer in LAYERS:
            assert_finite(net, x, method, layer)


@pytest.mark.parametrize("method", METHODS)
def test_constant_images(method):
    """Uniform grey and white images: every patch is the same, the attribution has no preferred location."""
    net = model()
    for value in (0.5, 1.0):
        for layer in LAYERS:
            assert_finite(net, encoded(torch.full((2, 3, SIZE, SIZE), value)), method, layer)


@pytest.mark.parametrize("method", METHODS)
def test_saturated_logits(method):
    net = model(saturated=True)
    torch.manual_seed(1)
    x = encoded(torch.rand(2, 3, SIZE, SIZE))
    assert net(x).abs().min() > 5e3  # saturated: sigmoid and softmax are flat at these logits
    for layer in LAYERS:
        assert_finite(net, x, method, layer)


def _fp16_autocast_on_cpu() -> bool:
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            return nn.functional.linear(torch.ones(1, 2), torch.ones(2, 2)).dtype == torch.float16
    except (RuntimeError, AssertionError):
        return False


@pytest.mark.parametrize("method", METHODS)
def test_bf16_autocast(method):
    """bf16 (``mixed_precision: bf16``): everything finite, gradients
    included, at loss scale 1."""
    net = model()
    torch.manual_seed(1)
    x = encoded(torch.rand(2, 3, SIZE, SIZE))
    for layer in LAYERS:
        assert_finite(net, x, method, layer, dtype=torch.bfloat16)


@pytest.mark.skipif(not _fp16_autocast_on_cpu(), reason="this torch build has no float16 autocast on CPU")
@pytest.mark.parametrize("method", METHODS)
def test_fp16_autocast(method):
    """fp16: attributions, losses and metrics finite; gradients finite at loss scale 1 for the Energy and L1
    losses (with the classification and similarity terms). PPCE and RRR* normalise by ``max|A|``, so their gradients
    grow like ``1 / max|A|`` and can exceed fp16's range (65504) inside the backward pass for the small explanations
    of an untrained network (here B-cos at the input, ``max|A|`` ≈ 1e-5): they are finite once the loss is scaled
    down as dynamic loss scaling (``torch.amp.GradScaler``, the trainer's ``mixed_precision: fp16``) does — here by
    2⁻¹⁰."""
    net = model()
    torch.manual_seed(1)
    x = encoded(torch.rand(2, 3, SIZE, SIZE))
    for layer in LAYERS:
        assert_finite(net, x, method, layer, losses=("energy", "l1"), dtype=torch.float16)
        assert_finite(net, x, method, layer, dtype=torch.float16, scale=2.0 ** -10)
