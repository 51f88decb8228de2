"""What every benchmark section of ``scripts/bench.py`` shares: the run's :class:`Settings`, a table :class:`Row`, the
section registry (:func:`section`), alternating timings (:func:`alternate`), the markdown table, and the models,
batches and losses several sections measure.

Sections live in ``bench.py`` and, one module per topic, in ``bench_*.py`` beside it; ``bench.py`` imports them, so
that they register (in the order of import) before it runs.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rightreasons.measure import PeakMemory


@dataclass(frozen=True)
class Settings:
    """What every section gets: the device, whether to run at tiny sizes, and the size of the ImageNet rehearsal
    (class folders, images per class)."""

    device: torch.device
    quick: bool
    imagenet_classes: int = 1000
    imagenet_images: int = 2

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


@dataclass
class Row:
    """One line of the result table: ours and the reference in ``unit`` (seconds or MiB); ``ratio`` compares them as
    ``target`` states."""

    section: str
    ours: float
    reference: float
    ratio: float
    target: str
    passed: bool | None  # None: a measurement without a target
    setup: str
    unit: str = "s"


SECTIONS: dict[str, Callable[[Settings], list[Row]]] = {}


def section(name: str) -> Callable[[Callable[[Settings], list[Row]]], Callable[[Settings], list[Row]]]:
    """Register a benchmark section under ``name`` (the order of registration is the order of the table)."""
    def register(fn: Callable[[Settings], list[Row]]) -> Callable[[Settings], list[Row]]:
        if name in SECTIONS:
            raise ValueError(f"benchmark section {name!r} is already registered")
        SECTIONS[name] = fn
        return fn

    return register


def alternate(contenders: dict[str, Callable[[], object]], settings: Settings, repeats: int,
              warmup: int) -> dict[str, list[float]]:
    """Wall-clock seconds of each contender, run in turn ``repeats`` times after ``warmup`` untimed rounds."""
    for _ in range(warmup):
        for fn in contenders.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            settings.sync()
            start = time.perf_counter()
            fn()
            settings.sync()
            times[name].append(time.perf_counter() - start)
    return times


def reference_resnet(name: str, num_classes: int) -> nn.Module:
    """The ``bcos`` package's (B-cos v2 release's) model ``name`` with the release's conv, norm and logit bias."""
    try:
        from bcos.models import resnet as ref_resnet
        from bcos.modules import BatchNormUncentered2d, BcosConv2d, NoBias
    except ImportError as e:
        raise SystemExit(f"the reference needs the bcos package (pip install -e '.[dev]'): {e}") from e
    return getattr(ref_resnet, name)(num_classes=num_classes, norm_layer=NoBias(BatchNormUncentered2d),
                                     conv_layer=BcosConv2d, logit_bias=-math.log(num_classes - 1))


def saved_tensor_bytes(loss: Callable[[], Tensor]) -> int:
    """Bytes of the distinct storages autograd holds for the backward of ``loss()`` when that backward starts: the
    activation memory of a training step, which dominates its peak memory (measurable on CPU, where no allocator
    statistics exist). Tensors saved only for a while (e.g. by a recomputation inside an explanation's backward) and
    freed before the loss exists are not counted. The backward is run afterwards, so that the graph is freed."""
    packed: list[tuple[weakref.ref, tuple[int, int]]] = []

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        packed.append((weakref.ref(t), (storage.data_ptr(), storage.nbytes())))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        value = loss()
    held = {key: key[1] for ref, key in packed if ref() is not None}
    value.backward()
    return sum(held.values())


def peak_step_bytes(model: nn.Module, inputs: Iterable[Tensor], loss: Callable[[], Tensor]) -> int:
    """The peak live bytes (:class:`PeakMemory`) of a training step's forward and backward of ``loss()``: weights,
    buffers and ``inputs`` included, gradients of a previous step cleared first."""
    model.zero_grad(set_to_none=True)
    with PeakMemory([*model.parameters(), *model.buffers(), *inputs]) as memory:
        loss().backward()
    return memory.peak


def boxed_batch(batch: int, size: int, device: torch.device) -> tuple[Tensor, Tensor, list[Tensor], list[Tensor]]:
    """A random encoded batch ``[batch, 6, size, size]`` of 20 classes, its one-hot labels ``[batch, 20]`` and one
    centred box per image labelled with the image's class."""
    x = torch.rand(batch, 6, size, size, device=device)
    labels = F.one_hot(torch.arange(batch) % 20, 20).float().to(device)
    boxes = [torch.tensor([[size / 4, size / 4, 3 * size / 4, 3 * size / 4]]) for _ in range(batch)]
    box_labels = [torch.tensor([n % 20]) for n in range(batch)]
    return x, labels, boxes, box_labels


def plain_loss(model: nn.Module, x: Tensor, labels: Tensor) -> Callable[[], Tensor]:
    """The loss of a plain training step (BCE), its gradients cleared first."""
    def loss() -> Tensor:
        model.zero_grad(set_to_none=True)
        return F.binary_cross_entropy_with_logits(model(x), labels)
    return loss


def guided_loss(model: nn.Module, layer: str, x: Tensor, labels: Tensor, boxes: list[Tensor],
                box_labels: list[Tensor], compile: str = "no") -> Callable[[], Tensor]:
    """The loss of a guided step: BCE + 1e-3 Energy on B-cos contributions at ``layer``, every image annotated,
    compiled whole with the ``torch.compile`` backend ``compile`` where the step can be. The objective's host decisions
    read the labels on the host, as the trainer gives them (no sync)."""
    from rightreasons.guidance import GuidanceObjective

    objective = GuidanceObjective("bcos", layer, "energy", compile=compile)
    has_boxes, host_labels = torch.ones(len(x), dtype=torch.bool), labels.cpu()

    def loss() -> Tensor:
        model.zero_grad(set_to_none=True)
        out = objective(model, x, host_labels, boxes, box_labels, has_boxes, torch.Generator().manual_seed(0))
        return F.binary_cross_entropy_with_logits(out.logits, labels) + 1e-3 * out.loss
    return loss


def step(loss: Callable[[], Tensor]) -> Callable[[], None]:
    """A training step's forward and backward (no optimiser update)."""
    return lambda: loss().backward()


def standard_resnet50(device: torch.device) -> nn.Module:
    """torchvision's ResNet-50 with 20 classes, in training mode: the cost B-cos is measured against."""
    from torchvision.models import resnet50

    return resnet50(num_classes=20).train().to(device)


def _value(value: float, unit: str) -> str:
    return f"{value:.4f} s" if unit == "s" else f"{value:.1f} {unit}" if unit == "img/s" else f"{value:.0f} {unit}"


def _verdict(passed: bool | None) -> str:
    return "—" if passed is None else "pass" if passed else "FAIL"


def markdown(rows: list[Row]) -> str:
    lines = ["| section | ours | reference | ratio | target | pass/fail |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.section} | {_value(r.ours, r.unit)} | {_value(r.reference, r.unit)} | {r.ratio:.3f} | "
              f"{r.target} | {_verdict(r.passed)} |" for r in rows]
    lines += [""] + [f"- {r.section}: {r.setup}" for r in rows]
    return "\n".join(lines)


