"""Aten operations (about one kernel launch each on a GPU) of a B-cos training step, counted deterministically with
:class:`rightreasons.measure.StepCounter`: a step made of many small operations is bound by the host, so their number
must not creep back up (``make bench``, section ``launches``, measures B-cos ResNet-50).

The bounds are the counts the closed-form backwards reach (issue 32), with the few operations an explanation's second
backward spends to recompute the gradients it does not store (:class:`~rightreasons.bcos.dynamic._Recipe`); the
mechanism before them took 6.4x (plain) and 14.3x (guided at the input) the operations of torchvision's ResNet-18 in
the same setting. Never timed.
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.models import resnet18

import rightreasons as rr
from rightreasons.bcos import BcosConv2d, explanation_mode
from rightreasons.bcos.norms import NORM_LAYERS
from rightreasons.guidance import GuidanceObjective
from rightreasons.measure import Counts, StepCounter


def count(step: Callable[[], object]) -> Counts:
    """The operations of ``step()``, after one call that creates whatever is created lazily."""
    step()
    with StepCounter() as counter:
        step()
    return counter.counts


def training_step(model: nn.Module, loss: Callable[[], Tensor]) -> Callable[[], None]:
    def step() -> None:
        model.zero_grad(set_to_none=True)
        loss().backward()
    return step


@pytest.fixture(scope="module")
def batch() -> tuple[Tensor, Tensor, list[Tensor], list[Tensor]]:
    """Two encoded 32 px images of 20 classes, their one-hot labels and one centred box each."""
    torch.manual_seed(0)
    x = torch.rand(2, 6, 32, 32)
    labels = F.one_hot(torch.arange(2), 20).float()
    boxes = [torch.tensor([[8.0, 8.0, 24.0, 24.0]]) for _ in range(2)]
    return x, labels, boxes, [torch.tensor([n]) for n in range(2)]


@pytest.fixture(scope="module")
def step_counts(batch) -> dict[str, Counts]:
    """One training step of torchvision's ResNet-18 (BCE) and of a B-cos ResNet-18 of width 8: BCE, and BCE + Energy
    on B-cos contributions at the input (an explanation with ``create_graph`` and one backward)."""
    x, labels, boxes, box_labels = batch
    torch.manual_seed(0)
    standard = resnet18(num_classes=20).train()
    bcos = rr.create_model("bcos_resnet18", num_classes=20, inplanes=8).train()
    objective = GuidanceObjective("bcos", "input", "energy")
    annotated = torch.ones(2, dtype=torch.bool)

    def guided() -> Tensor:
        out = objective(bcos, x, labels, boxes, box_labels, annotated, torch.Generator().manual_seed(0))
        return F.binary_cross_entropy_with_logits(out.logits, labels) + 1e-3 * out.loss

    return {"standard": count(training_step(standard, lambda: F.binary_cross_entropy_with_logits(
                standard(x[:, :3]), labels))),
            "plain": count(training_step(bcos, lambda: F.binary_cross_entropy_with_logits(bcos(x), labels))),
            "guided": count(training_step(bcos, guided))}


def test_a_plain_bcos_step_takes_at_most_4_25_times_the_operations_of_a_standard_one(step_counts):
    ratio = step_counts["plain"].ops / step_counts["standard"].ops
    assert ratio <= 4.25, f"{ratio:.2f}x; by op: {step_counts['plain'].by_op.most_common(10)}"


def test_a_guided_bcos_step_takes_at_most_9_4_times_the_operations_of_a_standard_one(step_counts):
    ratio = step_counts["guided"].ops / step_counts["standard"].ops
    assert ratio <= 9.4, f"{ratio:.2f}x; by op: {step_counts['guided'].by_op.most_common(10)}"


def layer_counts(kernel_size: int) -> dict[str, Counts]:
    """A B-cos unit and its uncentred BatchNorm on a leaf input: a training step (``plain``), and its explanation with
    ``create_graph`` followed by the backward of a loss on the explanation and the output (``explained``)."""
    torch.manual_seed(0)
    unit = nn.Sequential(BcosConv2d(4, 4, kernel_size, padding=kernel_size // 2), NORM_LAYERS["bnu"](4)).train()
    x = torch.randn(2, 4, 6, 6, requires_grad=True)
    grad = torch.randn(2, 4, 6, 6)

    def plain() -> None:
        unit.zero_grad(set_to_none=True)
        unit(x).backward(grad)

    def explained() -> None:
        unit.zero_grad(set_to_none=True)
        with explanation_mode(unit):
            y = unit(x)
            (weights,) = torch.autograd.grad((y * grad).sum(), x, create_graph=True)
        ((weights * x).square().sum() + (y * grad).sum()).backward()

    return {"plain": count(plain), "explained": count(explained)}


@pytest.mark.parametrize("kernel_size, plain, explained", [(3, 59, 139), (1, 56, 135)])
def test_a_unit_and_its_norm_take_a_bounded_number_of_operations(kernel_size, plain, explained):
    """The forward alone takes 24 (3x3) or 22 (1x1) of them, the release's own operations; a standard conv +
    BatchNorm + ReLU takes 14 for forward and backward."""
    counts = layer_counts(kernel_size)
    assert counts["plain"].ops <= plain, counts["plain"].by_op.most_common()
    assert counts["explained"].ops <= explained, counts["explained"].by_op.most_common()
