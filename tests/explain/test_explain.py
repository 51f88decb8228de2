"""Batched explanations (``explain``), their errors, and the colour decoding of docs/science.md, input encoding and training (``to_rgba``)."""

from __future__ import annotations

import math

import pytest
import torch

import rightreasons as rr
from rightreasons.bcos import AddInverse
from rightreasons.explain import explain, resolve_target, save_explanation, to_rgba

NUM_CLASSES = 5


@pytest.fixture
def model():
    return rr.create_model("bcos_cifar10_resnet20", num_classes=NUM_CLASSES).eval()


@pytest.fixture
def images():
    return AddInverse()(torch.rand(3, 3, 16, 16))


def test_shapes_and_dtypes_for_a_batch_with_mixed_targets(model, images):
    target = torch.tensor([4, 0, 2])
    e = explain(model, images, target)
    assert e.method == "bcos_weights"
    assert e.logits.shape == (3, NUM_CLASSES) and e.logits.dtype == torch.float32
    assert e.target.shape == (3,) and e.target.dtype == torch.int64 and e.target.tolist() == [4, 0, 2]
    assert e.weights.shape == (3, 6, 16, 16) and e.weights.dtype == torch.float32
    assert e.maps.shape == (3, 16, 16) and e.maps.dtype == torch.float32
    torch.testing.assert_close(e.maps, (e.weights * images).sum(1))
    assert not any(t.requires_grad for t in (e.logits, e.weights, e.maps))


def test_target_none_is_the_argmax_and_an_int_applies_to_every_sample(model, images):
    e = explain(model, images)
    assert torch.equal(e.target, e.logits.argmax(1))
    assert explain(model, images, 3).target.tolist() == [3, 3, 3]
    assert explain(model, images, torch.tensor(1)).target.tolist() == [1, 1, 1]


def test_one_backward_pass_gives_the_single_sample_explanations(model, images, monkeypatch):
    calls = []
    grad = torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda *a, **k: calls.append(1) or grad(*a, **k))
    target = torch.tensor([1, 3, 0])
    batched = explain(model, images, target)
    assert len(calls) == 1
    for n in range(3):
        single = explain(model, images[n:n + 1], target[n:n + 1])
        torch.testing.assert_close(batched.weights[n:n + 1], single.weights, rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(batched.logits[n:n + 1], single.logits, rtol=1e-5, atol=1e-7)


def test_create_graph_keeps_the_explanation_differentiable(model, images):
    x = images.clone().requires_grad_(True)
    e = explain(model, x, 2, create_graph=True)
    assert e.weights.requires_grad and e.maps.requires_grad and e.logits.requires_grad
    e.maps.clamp(min=0).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert x.grad is not None


@pytest.mark.parametrize("target, message", [
    (torch.tensor([0, 5, 1]), r"\[0, 4\] for logits of shape \[3, 5\].*\[0, 5, 1\]"),
    (-1, r"\[0, 4\] for logits of shape \[3, 5\]"),
    (torch.tensor([0, 1]), r"shape \[N\] = \[3\], got shape \(2,\)"),
    (torch.tensor([[0, 1, 2]]), r"shape \[N\] = \[3\], got shape \(1, 3\)"),
])
def test_bad_targets_are_errors_naming_the_shape(model, images, target, message):
    with pytest.raises(ValueError, match=message):
        explain(model, images, target)


def test_float_targets_are_refused():
    with pytest.raises(TypeError, match="integer class indices"):
        resolve_target(torch.tensor([0.0, 1.0]), torch.zeros(2, 3))


def test_three_channel_input_names_the_six_channel_encoding(model):
    with pytest.raises(ValueError, match=r"six-channel B-cos encoding.*AddInverse"):
        explain(model, torch.rand(2, 3, 16, 16))


# ------------------------------------------------------------------------------------------------ to_rgba

def test_to_rgba_follows_the_formula_on_a_hand_made_example():
    """Four pixels by hand (the image is all ones).

    * (0, 0): W = [2, 0, -1, 1, 1, 0] → W / max|W| = [1, 0, -.5, .5, .5, 0] → clamped [1, 0, 0, .5, .5, 0]
      → rgb = [1/1.5, 0/0.5, 0/0] = [2/3, 0, 0]; alpha = ‖W‖ = √7 (the contribution 3 is positive).
    * (0, 1): W = [0, 3, 0, 0, 1, 0] → [0, 1, 0, 0, 1/3, 0] → rgb = [0, 1/(1 + 1/3), 0] = [0, 3/4, 0]; alpha = √10.
    * (1, 0): W = -1 everywhere → contribution −6 < 0 → alpha ≈ 0; rgb = 0.
    * (1, 1): W = 0 → rgb = 0, alpha = 0.

    Without smoothing and with the 100th percentile, alpha is divided by its maximum √10.
    """
    weights = torch.zeros(6, 2, 2)
    weights[:, 0, 0] = torch.tensor([2.0, 0, -1, 1, 1, 0])
    weights[:, 0, 1] = torch.tensor([0.0, 3, 0, 0, 1, 0])
    weights[:, 1, 0] = -1.0
    image = torch.ones(6, 2, 2)
    rgba = to_rgba(image, weights, smooth=0, alpha_percentile=100)
    expected = torch.zeros(2, 2, 4)
    expected[0, 0] = torch.tensor([2 / 3, 0, 0, math.sqrt(7 / 10)])
    expected[0, 1] = torch.tensor([0, 3 / 4, 0, 1.0])
    torch.testing.assert_close(rgba, expected, rtol=1e-5, atol=1e-6)


def test_to_rgba_smooths_alpha_with_a_zero_padded_average():
    """Only pixel (0, 0) has weight: a 3×3 average with zero padding spreads α/9 to (0,0), (0,1), (1,0), (1,1);
    divided by its maximum that is 1 there and 0 elsewhere."""
    weights = torch.zeros(6, 3, 3)
    weights[0, 0, 0] = 1.0
    rgba = to_rgba(torch.ones(6, 3, 3), weights, smooth=3, alpha_percentile=100)
    expected_alpha = torch.tensor([[1.0, 1, 0], [1, 1, 0], [0, 0, 0]])
    torch.testing.assert_close(rgba[..., 3], expected_alpha)


def test_to_rgba_of_a_real_explanation_is_an_image_in_0_1(model, images):
    e = explain(model, images, 1)
    rgba = to_rgba(images[0], e.weights[0])
    assert rgba.shape == (16, 16, 4) and rgba.dtype == torch.float32
    assert rgba.min() >= 0 and rgba.max() <= 1
    batch = to_rgba(images, e.weights)
    assert batch.shape == (3, 16, 16, 4)
    torch.testing.assert_close(batch[0], rgba)


def test_to_rgba_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match=r"\[6, H, W\].*\(3, 4, 4\)"):
        to_rgba(torch.rand(3, 4, 4), torch.rand(3, 4, 4))


def test_save_explanation_writes_a_png(tmp_path, model, images):
    e = explain(model, images[:1])
    path = save_explanation(tmp_path / "figures" / "explanation.png", images[0], e.weights[0], title="class 0")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
