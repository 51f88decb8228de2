"""Completeness of B-cos explanations: for a bias-free B-cos CNN, ``logit − logit_bias == Σ_{c,h,w} W(x) ⊙ x``.

The test iterates the registry (``list_models(bcos=True)``), so every B-cos CNN registered later is checked too.

Skip rule — a registered B-cos model is *not* checked here when
  * its family is a transformer family (:data:`TRANSFORMER_FAMILIES`): ``"vit"`` models add a positional embedding, so
    they are affine and completeness does not hold; ``"holistic_vit"`` models only accept 224-px inputs and have their
    own completeness test (``tests/models/test_holistic_vit.py``); or
  * the built model declares ``is_affine = True``.

Settings: 32-px inputs (every CNN of the zoo accepts them; 16 px for CIFAR nets, ``small_inputs=True``, which
downsample only 4×), batch 2, mixed targets, float32, relative tolerance 1e-4.
Every model is checked in train mode (batch statistics, the mode of guidance training); models under
:data:`EVAL_MODE_MAX_PARAMS` parameters in eval mode too (running statistics; the larger models repeat the same
blocks, and skipping them keeps the runtime in check). Two classes, so that the default logit bias ``-log(C - 1)`` is
0 and float32 rounding of the bias cannot hide small raw logits.

Models are built on the ``meta`` device (no default initialisation, which would dominate the runtime) and given
random values that keep the check meaningful (:func:`initialise`): B-cos weights from N(0.25, 1) (with zero-mean
weights a unit's output is about ‖patch‖ / fan_in, so a norm-free net such as VGG-19 underflows to exactly 0; positive
weights alone grow it until it overflows; a mean of 0.25 keeps every zoo model between 1e-3 and 1e3), every other
parameter (norm scales, layer scales — and any stray bias, which would then break completeness) from U(0.5, 1.5).
The train-mode pass sets the running statistics to those of the batch, as after training (with ``running_var = 1``
the residual sums of a deep ResNet grow without bound in eval mode).
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import rightreasons as rr
from rightreasons.bcos import BcosConv2d, BcosLinear
from rightreasons.explain import explain
from rightreasons.models.registry import get_model_spec

TRANSFORMER_FAMILIES = {"vit", "holistic_vit"}
EVAL_MODE_MAX_PARAMS = 20_000_000
NUM_CLASSES = 2


def initialise(model: nn.Module) -> nn.Module:
    """Materialise a ``meta``-device model on the CPU with the random values described above."""
    model.to_empty(device="cpu")
    bcos_weights = {id(m.linear.weight) for m in model.modules() if isinstance(m, (BcosConv2d, BcosLinear))}
    buffer_values = {"running_var": 1.0, "running_mean": 0.0, "num_batches_tracked": 0}
    with torch.no_grad():
        for p in model.parameters():
            if id(p) in bcos_weights:
                p.normal_(mean=0.25)
            else:
                p.uniform_(0.5, 1.5)
        for name, buffer in model.named_buffers():
            kind = name.rsplit(".", 1)[-1]
            assert kind in buffer_values, f"initialise() does not know the buffer {name}; give it a value here"
            buffer.fill_(buffer_values[kind])
        for m in model.modules():
            if getattr(m, "running_var", None) is not None:
                m.momentum = 1.0  # the train-mode pass sets the running statistics to those of the batch
    return model


def checked_names() -> list[str]:
    return [n for n in rr.list_models(bcos=True) if get_model_spec(n).family not in TRANSFORMER_FAMILIES]


def test_the_registry_has_cnns_to_check():
    assert {"bcos_resnet18", "bcos_cifar10_resnet20"} <= set(checked_names())


def assert_complete(model: nn.Module, x: Tensor, target: Tensor) -> None:
    e = explain(model, x, target)
    explained = e.logits.gather(1, target[:, None]).squeeze(1) - model.logit_layer.bias
    mode = "train" if model.training else "eval"
    assert (explained != 0).all(), f"{mode}: a raw logit is exactly 0, the check would be vacuous"
    error = (explained - e.maps.sum((1, 2))).abs().max() / explained.abs().max()
    assert error.item() <= 1e-4, f"{mode}: relative error {error.item():.2e}"


@pytest.mark.parametrize("name", checked_names())
def test_contributions_sum_to_the_logit_minus_its_bias(name):
    with torch.device("meta"):
        model = rr.create_model(name, num_classes=NUM_CLASSES)
    if getattr(model, "is_affine", False):
        pytest.skip(f"{name} declares is_affine=True")
    initialise(model)
    size = 16 if get_model_spec(name).defaults.get("small_inputs") else 32
    x = torch.rand(2, getattr(model, "in_chans", 6), size, size)
    target = torch.tensor([0, 1])
    assert_complete(model.train(), x, target)
    if sum(p.numel() for p in model.parameters()) < EVAL_MODE_MAX_PARAMS:
        assert_complete(model.eval(), x, target)
