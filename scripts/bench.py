"""Benchmarks of rightreasons (``make bench``): each section times ours against a reference and checks a target ratio.

Sections are functions registered with :func:`section`; each receives the run's :class:`Settings` and returns a list
of :class:`Row`. Timings alternate between the two contenders (ours, reference, ours, reference, ...) after a warm-up, so
that drifts of a shared machine hit both alike; medians are reported. The table is printed as markdown and, with
``--json PATH``, written as JSON. ``--quick`` runs every section at tiny sizes (a smoke test, not a measurement).

    python scripts/bench.py                       # all sections, full sizes
    python scripts/bench.py --only explain-batched --json bench.json
    python scripts/bench.py --quick               # seconds; what the test suite runs
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import rightreasons as rr
from rightreasons.explain import explain


@dataclass(frozen=True)
class Settings:
    """What every section gets: the device and whether to run at tiny sizes."""

    device: torch.device
    quick: bool

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


@dataclass
class Row:
    """One line of the result table. ``ratio`` compares ours with the reference as ``target`` states."""

    section: str
    ours_s: float
    reference_s: float
    ratio: float
    target: str
    passed: bool
    setup: str


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


@section("bcos-forward-backward")
def forward_backward(settings: Settings) -> list[Row]:
    """One training step's forward + backward (BCE) of B-cos ResNet-50, ours vs the release with the same weights."""
    batch, size, repeats, warmup = (2, 32, 2, 1) if settings.quick else (8, 224, 10, 2)
    ours = rr.create_model("bcos_resnet50").train().to(settings.device)
    ref = reference_resnet("resnet50", ours.num_classes)
    ref.load_state_dict(ours.state_dict())
    ref.train().to(settings.device)
    x = torch.rand(batch, 6, size, size, device=settings.device)
    labels = F.one_hot(torch.randint(ours.num_classes, (batch,)), ours.num_classes).float().to(settings.device)

    def step(model: nn.Module) -> Callable[[], None]:
        def run() -> None:
            model.zero_grad(set_to_none=True)
            F.binary_cross_entropy_with_logits(model(x), labels).backward()
        return run

    times = alternate({"ours": step(ours), "reference": step(ref)}, settings, repeats, warmup)
    ratio = statistics.median(o / r for o, r in zip(times["ours"], times["reference"]))
    return [Row("bcos-forward-backward", statistics.median(times["ours"]), statistics.median(times["reference"]), ratio,
               "<= 1.0", ratio <= 1.0, f"B-cos ResNet-50, train mode, batch {batch}x6x{size}x{size}, "
                                       f"{repeats} alternating repeats; ratio = median(ours / bcos package)")]


@section("explain-batched")
def explain_batched(settings: Settings) -> list[Row]:
    """``explain()`` on a batch vs one ``explain()`` per image (B-cos ResNet-18, eval mode)."""
    batch, size, repeats, warmup = (4, 32, 1, 1) if settings.quick else (16, 224, 5, 1)
    model = rr.create_model("bcos_resnet18").eval().to(settings.device)
    x = torch.rand(batch, 6, size, size, device=settings.device)
    target = torch.randint(model.num_classes, (batch,), device=settings.device)

    def batched() -> Tensor:
        return explain(model, x, target).weights

    def singles() -> list[Tensor]:
        return [explain(model, x[n:n + 1], target[n:n + 1]).weights for n in range(batch)]

    times = alternate({"batched": batched, "singles": singles}, settings, repeats, warmup)
    speedup = statistics.median(s / b for b, s in zip(times["batched"], times["singles"]))
    return [Row("explain-batched", statistics.median(times["batched"]), statistics.median(times["singles"]), speedup,
               ">= 4.0", speedup >= 4.0, f"B-cos ResNet-18, eval mode, {batch} images of 6x{size}x{size}; ours = one "
                                         f"batched explain(), reference = {batch} single-image explain() calls; "
                                         "ratio = median(reference / ours)")]


def saved_tensor_bytes(step: Callable[[], object]) -> int:
    """Bytes of the distinct tensors autograd saves for backward during ``step``: the activation memory of a
    training step, which dominates its peak memory (measurable on CPU, where no allocator statistics exist)."""
    seen: dict[tuple[int, int], int] = {}

    def pack(t: Tensor) -> Tensor:
        seen[(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sum(seen.values())


def _guidance_step(layer: str, quick: bool) -> Callable[[Settings], list[Row]]:
    def run(settings: Settings) -> list[Row]:
        from rightreasons.guidance import GuidanceObjective

        batch, size, repeats, warmup = (2, 32, 2, 1) if quick or settings.quick else (8, 64, 10, 2)
        model = rr.create_model("bcos_resnet50", num_classes=20).train().to(settings.device)
        x = torch.rand(batch, 6, size, size, device=settings.device)
        labels = F.one_hot(torch.arange(batch) % 20, 20).float().to(settings.device)
        boxes = [torch.tensor([[size / 4, size / 4, 3 * size / 4, 3 * size / 4]]) for _ in range(batch)]
        box_labels = [torch.tensor([n % 20]) for n in range(batch)]
        has_boxes = torch.ones(batch, dtype=torch.bool)
        objective = GuidanceObjective("bcos", layer, "energy")

        def plain() -> None:
            model.zero_grad(set_to_none=True)
            F.binary_cross_entropy_with_logits(model(x), labels).backward()

        def guided() -> None:
            model.zero_grad(set_to_none=True)
            out = objective(model, x, labels, boxes, box_labels, has_boxes, torch.Generator().manual_seed(0))
            (F.binary_cross_entropy_with_logits(out.logits, labels) + 1e-3 * out.loss).backward()

        times = alternate({"guided": guided, "plain": plain}, settings, repeats, warmup)
        ratio = statistics.median(g / p for g, p in zip(times["guided"], times["plain"]))
        target = {"input": 3.0, "mid2": 2.0, "final": 1.3}[layer]
        memory = saved_tensor_bytes(guided) / saved_tensor_bytes(plain)
        return [Row(f"guidance-step-{layer}", statistics.median(times["guided"]), statistics.median(times["plain"]),
                   ratio, f"<= {target}", ratio <= target,
                   f"B-cos ResNet-50, train mode, batch {batch}x6x{size}x{size}: BCE + Energy on B-cos contributions at "
                   f"{layer} (ours) vs BCE alone (reference), {repeats} alternating repeats; ratio = median(guided / "
                   f"plain); memory saved for backward {saved_tensor_bytes(guided) / 2**20:.0f} MiB vs "
                   f"{saved_tensor_bytes(plain) / 2**20:.0f} MiB ({memory:.2f}x)")]
    return run


for _layer in ("input", "mid2", "final"):
    section(f"guidance-step-{_layer}")(_guidance_step(_layer, quick=False))


def _distill_configs(settings: Settings, cache: Path) -> tuple[dict[str, object], tuple[str, str], int]:
    """Live and frozen e²KD configs of the same run (teacher, student, data, schedule), the pair, the batch size."""
    from rightreasons.config import from_dict
    from rightreasons.tasks import DistillConfig

    teacher, student = ("bcos_resnet18", "bcos_cifar10_resnet20") if settings.quick else ("bcos_resnet152",
                                                                                          "bcos_resnet18")
    size, batch, images = (32, 4, 16) if settings.quick else (64, 16, 128)
    raw = {"output_dir": str(cache.parent / "live"), "cpu": settings.device.type == "cpu",
           "model": {"name": student}, "teacher": {"name": teacher, "kwargs": {"num_classes": 2}},
           "data": {"name": "synthetic-birds", "image_size": size, "batch_size": batch,
                    "options": {"n": images, "size": size}},
           "optim": {"epochs": 100}, "eval": {"num_images": 0}, "distill": {"explanation_weight": 5.0}}
    live = from_dict(DistillConfig, raw)
    frozen = from_dict(DistillConfig, {**raw, "output_dir": str(cache.parent / "frozen"),
                                       "distill": {**raw["distill"], "frozen": str(cache)}})
    return {"live": live, "frozen": frozen}, (teacher, student), batch


def _forward_cost_ratio(settings: Settings, teacher: str, student: str, batch: int, size: int) -> float:
    """Median time of the teacher's forward pass over the student's (eval mode, no graph, same batch)."""
    models = {name: rr.create_model(name, num_classes=2).eval().to(settings.device) for name in (teacher, student)}
    x = torch.rand(batch, 6, size, size, device=settings.device)

    def forward(model: nn.Module) -> Callable[[], object]:
        return lambda: torch.no_grad()(model)(x)

    times = alternate({name: forward(m) for name, m in models.items()}, settings, 2 if settings.quick else 5, 1)
    return statistics.median(t / s for t, s in zip(times[teacher], times[student]))


@section("e2kd-frozen-step")
def e2kd_frozen_step(settings: Settings) -> list[Row]:
    """An e²KD training step with frozen (cached) teacher explanations vs one computing them live, and the share of
    the frozen step spent loading its batch (images, cached explanations and logits)."""
    import tempfile

    from rightreasons.experiments import compare_step_times
    from rightreasons.tasks import DistillationTask, write_teacher_cache

    steps, warmup = (2, 1) if settings.quick else (8, 2)
    with tempfile.TemporaryDirectory() as tmp:
        configs, (teacher, student), batch = _distill_configs(settings, Path(tmp) / "cache")
        size = configs["live"].data.image_size
        cost = _forward_cost_ratio(settings, teacher, student, batch, size)
        write_teacher_cache(configs["frozen"], Path(tmp) / "cache")
        t = compare_step_times({name: DistillationTask(c) for name, c in configs.items()}, steps=steps,
                               warmup=warmup)
    live, frozen = t["live"], t["frozen"]
    step = lambda r: r["step_seconds"] + r["loader_seconds"]  # noqa: E731
    speedup = step(live) / step(frozen)
    setup = (f"{teacher} -> {student} (teacher forward = {cost:.1f}x the student's), batch {batch}x6x{size}x{size}, "
             f"lambda = 5, {steps} alternating steps after {warmup} warm-up")
    return [Row("e2kd-frozen-step", step(frozen), step(live), speedup, ">= 2.0", speedup >= 2.0,
                f"{setup}; ours = frozen-explanation step, reference = live step (both with batch loading); "
                "ratio = live / frozen, of the mean step times"),
            Row("e2kd-cache-loader", frozen["loader_seconds"], step(frozen), frozen["loader_fraction"], "< 0.10",
                frozen["loader_fraction"] < 0.10,
                f"{setup}; ours = loading a batch with cached explanations (crop + flip of image and map), "
                "reference = the whole frozen step; ratio = loader share of the step")]


def markdown(rows: list[Row]) -> str:
    lines = ["| section | ours (s) | reference (s) | ratio | target | pass/fail |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.section} | {r.ours_s:.4f} | {r.reference_s:.4f} | {r.ratio:.3f} | {r.target} | "
              f"{'pass' if r.passed else 'FAIL'} |" for r in rows]
    lines += [""] + [f"- {r.section}: {r.setup}" for r in rows]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME", choices=list(SECTIONS),
                        help=f"run only this section (repeatable): {', '.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test, not a measurement")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="device to run on (default: cuda when available, else cpu)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings(torch.device(args.device), args.quick)
    torch.manual_seed(0)
    rows = [row for name in (args.only or SECTIONS) for row in SECTIONS[name](settings)]
    environment = {"device": str(settings.device), "quick": settings.quick, "threads": torch.get_num_threads(),
                   "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine()}
    print(f"rightreasons {rr.__version__} benchmarks ({', '.join(f'{k}={v}' for k, v in environment.items())})\n")
    print(markdown(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"environment": environment, "results": [asdict(r) for r in rows]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
