"""Benchmark section ``launches``: the aten operations (about one kernel launch each on a GPU, where a step made of
thousands of small ones is bound by the host) of one B-cos training step against a standard network's, counted
deterministically on any device (:class:`rightreasons.measure.StepCounter`).

Rows: B-cos ResNet-50 plain (BCE) and guided at the input (BCE + Energy on B-cos contributions) against torchvision's
ResNet-50; the B-cos forward alone, whose operations are the release's on purpose (docs/science.md); and, to say where
a step's operations go, those of each kind of layer (a 3x3 and a 1x1 B-cos unit with its uncentred BatchNorm, plain
and explained with a second backward; the BatchNorm alone) against a standard conv + BatchNorm + ReLU (BatchNorm).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

import rightreasons as rr
from benchlib import Row, Settings, boxed_batch, guided_loss, plain_loss, section, standard_resnet50
from rightreasons.bcos import BcosConv2d, explanation_mode
from rightreasons.bcos.norms import NORM_LAYERS
from rightreasons.measure import Counts, StepCounter


def count(run: Callable[[], object], device: list[Tensor]) -> Counts:
    """The operations of ``run()`` (after one call that creates what is created lazily), ``device`` tensors marked."""
    run()
    with StepCounter(device) as counter:
        run()
    return counter.counts


def _step(loss: Callable[[], Tensor]) -> Callable[[], None]:
    return lambda: loss().backward()


def _by_op(counts: Counts, top: int = 8) -> str:
    return ", ".join(f"{name} {n}" for name, n in counts.by_op.most_common(top))


def _layer_counts(channels: int, size: int, kernel_size: int) -> dict[str, Counts]:
    """Operations of one layer on a leaf input that requires grad: a B-cos unit + uncentred BatchNorm (``forward``;
    ``plain``: forward + backward; ``explaining``: forward and explanation with ``create_graph``; ``explained``: that
    and the backward of a loss on the explanation and the output, what a guided step does), the BatchNorm alone
    (``norm``), and the standard layers, conv + BatchNorm + ReLU (``standard``) and BatchNorm (``standard norm``)."""
    torch.manual_seed(0)
    padding = kernel_size // 2
    unit = nn.Sequential(BcosConv2d(channels, channels, kernel_size, padding=padding),
                         NORM_LAYERS["bnu"](channels)).train()
    standard = nn.Sequential(nn.Conv2d(channels, channels, kernel_size, padding=padding, bias=False),
                             nn.BatchNorm2d(channels), nn.ReLU(inplace=True)).train()
    x = torch.randn(2, channels, size, size, requires_grad=True)
    grad = torch.randn(2, channels, size, size)

    def plain(model: nn.Module) -> Callable[[], None]:
        def run() -> None:
            model.zero_grad(set_to_none=True)
            model(x).backward(grad)
        return run

    def explaining() -> tuple[Tensor, Tensor]:
        unit.zero_grad(set_to_none=True)
        with explanation_mode(unit):
            y = unit(x)
            (weights,) = torch.autograd.grad((y * grad).sum(), x, create_graph=True)
        return y, weights

    def explained() -> None:
        y, weights = explaining()
        ((weights * x).square().sum() + (y * grad).sum()).backward()

    steps = {"forward": lambda: unit(x), "plain": plain(unit), "explaining": explaining, "explained": explained,
             "norm": plain(unit[1]), "standard": plain(standard), "standard norm": plain(standard[1])}
    return {name: count(run, []) for name, run in steps.items()}


@section("launches")
def launches(settings: Settings) -> list[Row]:
    """Aten operations of a training step, B-cos vs standard (module docstring). Deterministic."""
    batch, size = (2, 32) if settings.quick else (2, 64)
    torch.manual_seed(0)
    bcos = rr.create_model("bcos_resnet50", num_classes=20).train().to(settings.device)
    standard_model = standard_resnet50(settings.device)
    x, labels, boxes, box_labels = boxed_batch(batch, size, settings.device)
    held = [*bcos.parameters(), *bcos.buffers(), x]
    standard = count(_step(plain_loss(standard_model, x[:, :3], labels)),
                     [*standard_model.parameters(), *standard_model.buffers(), x])
    plain = count(_step(plain_loss(bcos, x, labels)), held)
    guided = count(_step(guided_loss(bcos, "input", x, labels, boxes, box_labels)), held)
    forward = count(lambda: bcos(x), held)
    setup = (f"ResNet-50, 20 classes, train mode, batch {batch} at {size} px; ops = every aten operation (launches: "
             f"those that are not views); reference = torchvision's ResNet-50, a plain BCE step (forward + backward): "
             f"{standard.ops} ops, {standard.launches} launches")
    rows = [
        Row("launches: B-cos plain step", plain.ops, standard.ops, plain.ops / standard.ops, "<= 2.5",
            plain.ops / standard.ops <= 2.5,
            f"{setup}; ours = B-cos ResNet-50, BCE, forward + backward: {plain.launches} launches "
            f"({plain.launches / standard.launches:.2f}x); by op: {_by_op(plain)}", unit="ops"),
        Row("launches: B-cos guided step at the input", guided.ops, standard.ops, guided.ops / standard.ops, "<= 6",
            guided.ops / standard.ops <= 6,
            f"{setup}; ours = B-cos ResNet-50, BCE + 1e-3 Energy on B-cos contributions at the input (forward, "
            f"explanation with create_graph, one backward): {guided.launches} launches "
            f"({guided.launches / standard.launches:.2f}x); by op: {_by_op(guided)}", unit="ops"),
        Row("launches: B-cos forward alone", forward.ops, standard.ops, forward.ops / standard.ops, "report", None,
            f"{setup}; ours = the B-cos forward alone (train mode), the release's exact operations on purpose, which "
            f"no backward can win back: {forward.launches} launches; by op: {_by_op(forward)}", unit="ops"),
    ]
    channels, layer_size = (8, 8) if settings.quick else (64, 16)
    for kernel_size in (3, 1):
        counts = _layer_counts(channels, layer_size, kernel_size)
        layer = f"one layer, {channels} channels, batch 2 at {layer_size} px, its input a leaf that requires grad"
        reference = counts["standard"]
        unit = f"B-cos {kernel_size}x{kernel_size} unit + uncentred BatchNorm"
        versus = f"reference = conv + BatchNorm2d + ReLU, forward + backward: {reference.ops} ops"
        forward, plain, explaining, explained = (counts[k] for k in ("forward", "plain", "explaining", "explained"))
        rows += [
            Row(f"launches: {unit}, training step", plain.ops, reference.ops, plain.ops / reference.ops, "report",
                None, f"{layer}; {versus}; ours = {unit}, forward + backward: {forward.ops} + "
                      f"{plain.ops - forward.ops} ops, {plain.launches} launches; by op: {_by_op(plain)}", unit="ops"),
            Row(f"launches: {unit}, explained", explained.ops, reference.ops, explained.ops / reference.ops, "report",
                None, f"{layer}; {versus}; ours = {unit}: forward {forward.ops}, explanation with create_graph "
                      f"{explaining.ops - forward.ops}, backward of a loss on explanation and output "
                      f"{explained.ops - explaining.ops} ops ({explained.launches} launches in all); by op: "
                      f"{_by_op(explained)}", unit="ops"),
        ]
        if kernel_size == 3:
            norm, standard_norm = counts["norm"], counts["standard norm"]
            rows.append(Row("launches: uncentred BatchNorm (bnu), training step", norm.ops, standard_norm.ops,
                            norm.ops / standard_norm.ops, "report", None,
                            f"{layer}; reference = BatchNorm2d, forward + backward: {standard_norm.ops} ops; ours = "
                            f"the uncentred BatchNorm: {norm.launches} launches; by op: {_by_op(norm)}", unit="ops"))
    return rows
