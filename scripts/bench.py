"""Benchmarks of rightreasons (``make bench``): each section times ours against a reference and checks a target ratio.

Sections are functions registered with :func:`benchlib.section` — here and, one module per topic, in ``bench_*.py``
(imported below) — each receives the run's :class:`benchlib.Settings` and returns a list of :class:`benchlib.Row`. Timings alternate between the two contenders (ours, reference, ours, reference, ...) after a warm-up, so
that drifts of a shared machine hit both alike; medians are reported. The table is printed as markdown and, with
``--json PATH``, written as JSON. ``--quick`` runs every section at tiny sizes (a smoke test, not a measurement).

    python scripts/bench.py                       # all sections, full sizes
    python scripts/bench.py --only explain-batched --json bench.json
    python scripts/bench.py --quick               # seconds; what the test suite runs
    python scripts/bench.py --only e2kd-cache-imagenet --threads 1 --imagenet-images 2   # the 224 px rehearsal
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules, also when imported by a test

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import rightreasons as rr
from benchlib import (SECTIONS, Row, Settings, alternate, boxed_batch, guided_loss, markdown, peak_step_bytes,
                      plain_loss, reference_resnet, saved_tensor_bytes, section, standard_resnet50, step)
from rightreasons.explain import explain


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


def _guidance_step(layer: str) -> Callable[[Settings], list[Row]]:
    def run(settings: Settings) -> list[Row]:
        batch, size, repeats, warmup = (2, 32, 2, 1) if settings.quick else (8, 64, 10, 2)
        model = rr.create_model("bcos_resnet50", num_classes=20).train().to(settings.device)
        x, labels, boxes, box_labels = boxed_batch(batch, size, settings.device)
        plain = plain_loss(model, x, labels)
        guided = guided_loss(model, layer, x, labels, boxes, box_labels)
        times = alternate({"guided": step(guided), "plain": step(plain)}, settings, repeats, warmup)
        ratio = statistics.median(g / p for g, p in zip(times["guided"], times["plain"]))
        target = {"input": 3.0, "mid2": 2.0, "final": 1.3}[layer]
        held = {name: saved_tensor_bytes(loss) for name, loss in (("guided", guided), ("plain", plain))}
        return [Row(f"guidance-step-{layer}", statistics.median(times["guided"]), statistics.median(times["plain"]),
                   ratio, f"<= {target}", ratio <= target,
                   f"B-cos ResNet-50, train mode, batch {batch}x6x{size}x{size}: BCE + Energy on B-cos contributions at "
                   f"{layer} (ours) vs BCE alone (reference), {repeats} alternating repeats; ratio = median(guided / "
                   f"plain); memory saved for backward {held['guided'] / 2**20:.0f} MiB vs "
                   f"{held['plain'] / 2**20:.0f} MiB ({held['guided'] / held['plain']:.2f}x)")]
    return run


for _layer in ("input", "mid2", "final"):
    section(f"guidance-step-{_layer}")(_guidance_step(_layer))


@section("activation-memory")
def activation_memory(settings: Settings) -> list[Row]:
    """Activations held for the backward of a training step: B-cos ResNet-50 (plain; guided at input, mid2, final)
    vs torchvision's ResNet-50 (plain), the same images (B-cos: the 6-channel encoding); at batch 2, and per image
    (batch 2 minus batch 1: what a large batch approaches, without the weights). Deterministic."""
    size = 64 if settings.quick else 224  # batch 1 at 32 px leaves torchvision's last BatchNorm one value per channel
    bcos = rr.create_model("bcos_resnet50", num_classes=20).train().to(settings.device)
    standard_model = standard_resnet50(settings.device)
    held: dict[str, list[int]] = {}
    for batch in (1, 2):
        x, labels, boxes, box_labels = boxed_batch(batch, size, settings.device)
        losses = {"standard": plain_loss(standard_model, x[:, :3], labels), "plain": plain_loss(bcos, x, labels)}
        losses |= {f"guided at {layer}": guided_loss(bcos, layer, x, labels, boxes, box_labels)
                   for layer in ("input", "mid2", "final")}
        for name, loss in losses.items():
            held.setdefault(name, []).append(saved_tensor_bytes(loss))
    standard = held.pop("standard")
    setup = (f"ResNet-50, 20 classes, train mode, {size} px; bytes of the distinct tensors autograd holds when the "
             f"backward starts (saved-tensor hooks, weights included); reference = torchvision's ResNet-50, plain "
             f"BCE step ({standard[1] / 2**20:.0f} MiB at batch 2, {(standard[1] - standard[0]) / 2**20:.0f} MiB "
             "per image); guided = BCE + Energy on B-cos contributions, every image annotated; ratio = ours / "
             "reference")
    rows = []
    for name, (one, two) in held.items():
        target = 1.5 if name == "plain" else 2.5
        for label, ours, reference in (("batch 2", two, standard[1]), ("per image", two - one,
                                                                        standard[1] - standard[0])):
            rows.append(Row(f"activation-memory: B-cos {name}, {label}", ours / 2**20, reference / 2**20,
                            ours / reference, f"<= {target}", ours / reference <= target, setup, unit="MiB"))
    return rows


@section("stage-checkpointing")
def stage_checkpointing(settings: Settings) -> list[Row]:
    """Activation checkpointing of every stage (``model.activation_checkpointing: true``) of a B-cos ResNet-50: the
    peak memory of a training step (:func:`peak_step_bytes`, which sees what checkpointing keeps) and its time,
    checkpointed vs not, for a plain step and guided steps at the input, mid2 and final (alternating)."""
    from rightreasons.models.checkpointing import checkpoint_stages

    batch, size, repeats = (2, 32, 1) if settings.quick else (2, 224, 2)
    torch.manual_seed(0)
    models = {"plain": rr.create_model("bcos_resnet50", num_classes=20).train().to(settings.device)}
    models["checkpointed"] = checkpointed = rr.create_model("bcos_resnet50", num_classes=20).train()
    checkpointed.load_state_dict(models["plain"].state_dict())
    checkpoint_stages(checkpointed.to(settings.device))
    rows = []
    for layer in ("input",) if settings.quick else (None, "input", "mid2", "final"):
        name = "plain step" if layer is None else f"guided at {layer}"
        peaks: dict[str, list[float]] = {"checkpointed": [], "plain": []}
        for images in (1, batch):  # per image: batch 2 minus batch 1 (what a large batch approaches)
            x, labels, boxes, box_labels = boxed_batch(images, size, settings.device)
            losses = {kind: plain_loss(model, x, labels) if layer is None else
                      guided_loss(model, layer, x, labels, boxes, box_labels) for kind, model in models.items()}
            for kind, loss in losses.items():
                peaks[kind].append(peak_step_bytes(models[kind], [x], loss) / 2**20)
        times = alternate({kind: step(loss) for kind, loss in losses.items()}, settings, repeats, warmup=0)
        ratio = statistics.median(c / p for c, p in zip(times["checkpointed"], times["plain"]))
        setup = (f"B-cos ResNet-50, 20 classes, train mode, 6x{size}x{size}, "
                 f"{'BCE' if layer is None else f'BCE + Energy on B-cos contributions at {layer}'}; ours = its four "
                 "stages checkpointed, reference = none")
        memory = ("peak live tensor bytes of forward + backward (PeakMemory), weights and gradients included; ratio = "
                  "ours / reference")
        (ours_one, ours), (reference_one, reference) = peaks["checkpointed"], peaks["plain"]
        rows += [Row(f"stage-checkpointing: {name}, peak memory", ours, reference, ours / reference, "report", None,
                     f"{setup}; batch {batch}; {memory}", unit="MiB"),
                 Row(f"stage-checkpointing: {name}, peak memory per image", ours - ours_one,
                     reference - reference_one, (ours - ours_one) / (reference - reference_one), "report", None,
                     f"{setup}; batch {batch} minus batch 1; {memory}", unit="MiB"),
                 Row(f"stage-checkpointing: {name}, step time", statistics.median(times["checkpointed"]),
                     statistics.median(times["plain"]), ratio, "report", None,
                     f"{setup}; batch {batch}, {torch.get_num_threads()} threads, {repeats} alternating repeats after "
                     "the memory steps; ratio = median(ours / reference)")]
    return rows


@section("train-step-time")
def train_step_time(settings: Settings) -> list[Row]:
    """A training step (BCE forward + backward) of B-cos ResNet-50 vs torchvision's ResNet-50, alternating."""
    batch, size, repeats, warmup = (2, 32, 2, 1) if settings.quick else (8, 128, 10, 2)
    bcos = rr.create_model("bcos_resnet50", num_classes=20).train().to(settings.device)
    x, labels, _, _ = boxed_batch(batch, size, settings.device)
    times = alternate({"bcos": step(plain_loss(bcos, x, labels)),
                       "standard": step(plain_loss(standard_resnet50(settings.device), x[:, :3], labels))},
                      settings, repeats, warmup)
    ratio = statistics.median(b / s for b, s in zip(times["bcos"], times["standard"]))
    return [Row("train-step-time", statistics.median(times["bcos"]), statistics.median(times["standard"]), ratio,
                "<= 1.25", ratio <= 1.25,
                f"ResNet-50, 20 classes, train mode, batch {batch} at {size} px, {torch.get_num_threads()} threads, "
                f"{repeats} alternating repeats; ours = B-cos (6-channel input), reference = torchvision; "
                "ratio = median(ours / reference)")]


@section("torch-compile")
def torch_compile(settings: Settings) -> list[Row]:
    """``torch.compile`` of a B-cos ResNet-18 vs torchvision's ResNet-18 (training mode): graph breaks (TorchDynamo's
    explain), compile time (the first compiled forward + backward), and the compiled B-cos step against its eager
    self; then the guided step (Energy at the input) and the e²KD step (``bcos_weights``) compiled whole
    (:mod:`rightreasons.explain.functional`) against their eager selves, the guided step's graph breaks and its cold
    compile time against the standard network's. ``--quick``: the ``aot_eager`` backend (traces, generates no
    kernels)."""
    import torch._dynamo
    import torch._inductor.config
    from torchvision.models import resnet18

    from rightreasons.distill import DistillObjective
    from rightreasons.distill.explanations import teacher_outputs
    from rightreasons.guidance import GuidanceObjective

    batch, size, repeats, warmup = (2, 32, 2, 1) if settings.quick else (8, 64, 10, 2)
    backend = "aot_eager" if settings.quick else "inductor"
    x, labels, boxes, box_labels = boxed_batch(batch, size, settings.device)
    models = {"bcos": rr.create_model("bcos_resnet18", num_classes=20).train().to(settings.device),
              "standard": resnet18(num_classes=20).train().to(settings.device)}
    inputs = {"bcos": x, "standard": x[:, :3]}
    breaks = torch._dynamo.explain(models["bcos"])(x).graph_break_count
    compile_seconds, compiled = {}, {}

    def cold(name: str, run: Callable[[], None]) -> None:
        """The seconds of ``run``, the first call of a compiled step, with no kernel cached by an earlier run."""
        start = time.perf_counter()
        with torch._inductor.config.patch(force_disable_caches=True):
            run()
        compile_seconds[name] = time.perf_counter() - start

    for name, model in models.items():
        torch._dynamo.reset()
        compiled[name] = torch.compile(model, backend=backend)
        cold(name, step(plain_loss(compiled[name], inputs[name], labels)))
    times = alternate({"compiled": step(plain_loss(compiled["bcos"], x, labels)),
                       "eager": step(plain_loss(models["bcos"], x, labels)),
                       "standard compiled": step(plain_loss(compiled["standard"], x[:, :3], labels)),
                       "standard eager": step(plain_loss(models["standard"], x[:, :3], labels))},
                      settings, repeats, warmup)

    # the guided and e²KD steps, compiled whole or eager (the library's double backward), on the same B-cos model
    bcos, host_labels, has_boxes = models["bcos"], labels.cpu(), torch.ones(batch, dtype=torch.bool)
    teacher = teacher_outputs(rr.create_model("bcos_resnet18", num_classes=20).eval().to(settings.device), x,
                              "bcos_weights", "input")
    guidance = {kind: GuidanceObjective("bcos", "input", "energy", compile=b)
                for kind, b in (("eager", "no"), ("compiled", backend))}
    distillation = {kind: DistillObjective("bcos_weights", "input", explanation_weight=1.0, compile=b)
                    for kind, b in (("eager", "no"), ("compiled", backend))}

    def guided(objective: GuidanceObjective) -> Callable[[], Tensor]:
        def loss() -> Tensor:
            bcos.zero_grad(set_to_none=True)
            out = objective(bcos, x, host_labels, boxes, box_labels, has_boxes, torch.Generator().manual_seed(0))
            return F.binary_cross_entropy_with_logits(out.logits, labels) + out.loss
        return loss

    def distilled(objective: DistillObjective) -> Callable[[], Tensor]:
        def loss() -> Tensor:
            bcos.zero_grad(set_to_none=True)
            return objective(bcos, x, teacher).total
        return loss

    torch._dynamo.reset()
    classes = labels.argmax(1)
    masks = guidance["compiled"].masks(boxes, box_labels, classes.cpu(), has_boxes, (size, size)).to(settings.device)
    guided_breaks = torch._dynamo.explain(guidance["compiled"].compiled.fn)(
        bcos, x, classes, masks, has_boxes.to(settings.device), 1.0).graph_break_count
    torch._dynamo.reset()
    cold("guided", step(guided(guidance["compiled"])))
    step(distilled(distillation["compiled"]))()  # its compilation
    steps = alternate({f"{task} {kind}": step(make(objectives[kind]))
                       for task, make, objectives in (("guided", guided, guidance), ("e2kd", distilled, distillation))
                       for kind in ("compiled", "eager")}, settings, repeats, warmup)

    def speedup(compiled_times: list[float], eager_times: list[float]) -> float:
        return statistics.median(e / c for c, e in zip(compiled_times, eager_times))

    speed = speedup(times["compiled"], times["eager"])
    cost = {kind: statistics.median(b / s for b, s in zip(times[bcos_kind], times[standard]))
            for kind, bcos_kind, standard in (("compiled", "compiled", "standard compiled"),
                                              ("eager", "eager", "standard eager"))}
    ratio = compile_seconds["bcos"] / compile_seconds["standard"]
    guided_ratio = compile_seconds["guided"] / compile_seconds["standard"]
    whole = {task: speedup(steps[f"{task} compiled"], steps[f"{task} eager"]) for task in ("guided", "e2kd")}
    setup = (f"ResNet-18, 20 classes, train mode, batch {batch} at {size} px, backend {backend}, "
             f"{torch.get_num_threads()} threads")
    return [Row("torch-compile: graph breaks", breaks, 0, float(breaks), "<= 2", breaks <= 2,
                f"{setup}: graph breaks of the B-cos ResNet-18 (torch._dynamo.explain); reference: none", unit="breaks"),
            Row("torch-compile: compile time", compile_seconds["bcos"], compile_seconds["standard"], ratio, "<= 3",
                ratio <= 3, f"{setup}: seconds of the first compiled BCE step, B-cos vs torchvision's ResNet-18"),
            Row("torch-compile: compiled vs eager step", statistics.median(times["compiled"]),
                statistics.median(times["eager"]), speed, ">= 1.2", speed >= 1.2,
                f"{setup}: B-cos BCE step compiled vs eager, {repeats} alternating repeats; ratio = median(eager / "
                "compiled), the speed-up"),
            *(Row(f"torch-compile: B-cos vs standard step, {kind}", statistics.median(times[kind]),
                  statistics.median(times[f"standard {kind}"]), cost[kind], "", None,
                  f"{setup}: BCE step of the B-cos vs torchvision's ResNet-18, both {kind}, {repeats} alternating "
                  "repeats; ratio = median(ours / reference), what fused kernels leave of a B-cos step's extra cost")
              for kind in ("eager", "compiled")),
            Row("torch-compile: guided step graph breaks", guided_breaks, 0, float(guided_breaks), "0",
                guided_breaks == 0, f"{setup}: graph breaks of the guided step compiled whole (forward, explanation on "
                                    "the functional route, Energy loss; torch._dynamo.explain); reference: none",
                unit="breaks"),
            Row("torch-compile: guided step compile time", compile_seconds["guided"], compile_seconds["standard"],
                guided_ratio, "<= 3", guided_ratio <= 3,
                f"{setup}: seconds of the first guided step compiled whole (BCE + Energy of B-cos contributions at "
                "the input, forward and backward, no cached kernel) vs the first compiled BCE step of torchvision's "
                "ResNet-18"),
            *(Row(f"torch-compile: {label} step compiled vs eager", statistics.median(steps[f"{task} compiled"]),
                  statistics.median(steps[f"{task} eager"]), whole[task], target, whole[task] >= 1.3 if target else None,
                  f"{setup}: {what}, compiled whole (functional route) vs eager (explanation mode, double "
                  f"backward), {repeats} alternating repeats; ratio = median(eager / compiled), the speed-up")
              for task, label, target, what in (
                  ("guided", "guided", ">= 1.3", "BCE + Energy of B-cos contributions at the input, every image "
                                                 "annotated"),
                  ("e2kd", "e²KD", "", "KD + 1 − cos of the student's W(x) and a B-cos ResNet-18 teacher's")))]


@section("guidance-few-boxes")
def guidance_few_boxes(settings: Settings) -> list[Row]:
    """A training step (forward, backward, Adam) whose batch has boxes on 10 % of its images: only those are
    explained (``explain="annotated"``) vs explaining the whole batch, and both vs a plain step; and the fully
    annotated batch. The demo's model: B-cos ResNet-18 of width 16."""
    from rightreasons.engine.optim import build_optimizer
    from rightreasons.guidance import GuidanceObjective

    batch, size, repeats, warmup = (8, 32, 2, 1) if settings.quick else (64, 64, 7, 2)
    model = rr.create_model("bcos_resnet18", num_classes=20, inplanes=16).train().to(settings.device)
    optimizer = build_optimizer(model.parameters(), "adam", 1e-4)  # the engine's (fused) Adam
    x, labels, boxes, box_labels = boxed_batch(batch, size, settings.device)
    host_labels = labels.cpu()  # what the trainer gives the objective: the loader's batch
    few = torch.zeros(batch, dtype=torch.bool)
    few[::10] = True  # 7 of 64 (10.9 %)
    every = torch.ones(batch, dtype=torch.bool)

    def plain() -> None:
        model.zero_grad(set_to_none=True)
        F.binary_cross_entropy_with_logits(model(x), labels).backward()
        optimizer.step()

    def guided(explain: str, has_boxes: Tensor) -> Callable[[], None]:
        objective = GuidanceObjective("bcos", "input", "energy", explain=explain)

        def step() -> None:
            model.zero_grad(set_to_none=True)
            out = objective(model, x, host_labels, boxes, box_labels, has_boxes, torch.Generator().manual_seed(0))
            (F.binary_cross_entropy_with_logits(out.logits, labels) + 1e-3 * out.loss).backward()
            optimizer.step()
        return step

    times = alternate({"plain": plain, "few": guided("annotated", few), "few-batch": guided("batch", few),
                       "all": guided("annotated", every)}, settings, repeats, warmup)
    med = {name: statistics.median(t) for name, t in times.items()}

    def ratio(a: str, b: str) -> float:
        return statistics.median(p / q for p, q in zip(times[a], times[b]))

    setup = (f"B-cos ResNet-18 (width 16), train mode, batch {batch}x6x{size}x{size}, BCE + 1e-3 Energy on B-cos "
             f"contributions at the input, Adam; 10 %: {int(few.sum())} of {batch} images annotated, 100 %: all; "
             f"{torch.get_num_threads()} threads, {repeats} alternating repeats, ratios are medians of per-repeat "
             "ratios")
    rows = [("guidance-few-boxes: 10 % vs plain", "few", "plain", "<= 1.5", lambda r: r <= 1.5),
            ("guidance-few-boxes: 100 % vs plain", "all", "plain", "<= 2.3", lambda r: r <= 2.3),
            ("guidance-few-boxes: whole batch vs annotated only (10 %)", "few-batch", "few", ">= 1.5",
             lambda r: r >= 1.5)]
    out = []
    for name, a, b, target, check in rows:
        r = ratio(a, b)
        ours, reference = (med[b], med[a]) if target.startswith(">=") else (med[a], med[b])
        out.append(Row(name, ours, reference, r, target, check(r), setup))
    return out


def _distill_configs(settings: Settings, cache: Path) -> tuple[dict[str, object], tuple[str, str], int]:
    """Live and frozen e²KD configs of the same run (teacher, student, data, schedule), the pair, the batch size."""
    from rightreasons.config import from_dict
    from rightreasons.distill import DistillConfig

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

    from rightreasons.distill import DistillationTask, write_teacher_cache
    from rightreasons.engine.timing import compare_step_times

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


@section("e2kd-every-k")
def e2kd_every_k(settings: Settings) -> list[Row]:
    """Live e²KD with the explanation term on every 4th step (``distill.explanation_every=4``) vs every step."""
    import tempfile

    from rightreasons.config import from_dict, to_dict
    from rightreasons.distill import DistillationTask, DistillConfig
    from rightreasons.engine.timing import compare_step_times

    steps, warmup = (4, 1) if settings.quick else (8, 2)
    with tempfile.TemporaryDirectory() as tmp:
        configs, (teacher, student), batch = _distill_configs(settings, Path(tmp) / "cache")
        every = to_dict(configs["live"])
        every = from_dict(DistillConfig, {**every, "output_dir": str(Path(tmp) / "every4"),
                                          "distill": {**every["distill"], "explanation_every": 4}})
        t = compare_step_times({"every": DistillationTask(configs["live"]), "every4": DistillationTask(every)},
                               steps=steps, warmup=warmup)
    step = lambda r: r["step_seconds"] + r["loader_seconds"]  # noqa: E731
    speedup = step(t["every"]) / step(t["every4"])
    size = configs["live"].data.image_size
    return [Row("e2kd-every-k: K=4 vs K=1", step(t["every4"]), step(t["every"]), speedup, ">= 1.5", speedup >= 1.5,
                f"{teacher} -> {student}, batch {batch}x6x{size}x{size}, lambda = 5, live teacher; ours = mean step "
                f"with the e²KD term every 4th step, reference = every step; {steps} alternating steps after "
                f"{warmup} warm-up (a multiple of 4: both kinds of step are averaged); ratio = K=1 / K=4")]


FLOAT16_CLASSES = 100
"""Classes of the rehearsal's float16 comparison cache (see :func:`e2kd_cache_imagenet`)."""

WNID = "n{:08d}"
"""Class folder names of the rehearsal (ImageNet's wnid pattern)."""


def write_imagenet_folder(root: Path, classes: int, per_class: int, size: int, seed: int = 0) -> Path:
    """An ImageNet-layout tree (``train/<wnid>/*.JPEG``, ``per_class`` images per class; ``val/``: one image for
    each of the first 8 classes) of smooth random colour images ``size × 1.25 size`` (so that the base view resizes
    and crops), JPEG quality 90. Returns ``root``."""
    from PIL import Image

    gen = torch.Generator().manual_seed(seed)
    for split, counts in (("train", [per_class] * classes), ("val", [1] * min(classes, 8))):
        for c, count in enumerate(counts):
            folder = root / split / WNID.format(c)
            folder.mkdir(parents=True, exist_ok=True)
            for k in range(count):
                low = torch.rand(3, 6, 8, generator=gen)
                image = F.interpolate(low[None], size=(size, size * 5 // 4), mode="bicubic", align_corners=False)[0]
                image = (image + 0.1 * torch.rand(image.shape, generator=gen)).clamp(0, 1)
                pixels = (image.permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()
                Image.fromarray(pixels).save(folder / f"{WNID.format(c)}_{k}.JPEG", quality=90)
    return root


def _cli(args: list[str]) -> tuple[float, str]:
    """Run ``python -m rightreasons ARGS`` with this process's thread count; (wall seconds, stdout)."""
    import os
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads()),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "rightreasons", *args], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"rightreasons {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return time.perf_counter() - start, result.stdout


def _read_rate(config_path: Path, cache: Path, batch: int) -> float:
    """Images/s of the frozen-e²KD training loader (JPEG decode, base view, cached map decoded, joint crop/flip,
    encoding) with 2 workers, over one pass of the training set."""
    from torch.utils.data import DataLoader

    from rightreasons.config import load_config
    from rightreasons.data import collate, load_dataset, train_transform
    from rightreasons.distill import DistillConfig, ExplanationCache

    config = load_config(DistillConfig, config_path)
    data = config.data
    maps = ExplanationCache(cache, verify=False)
    transform = train_transform(data.image_size, encoding="bcos", scale=tuple(data.crop_scale), explanations=maps,
                                crop_fraction=config.distill.crop_fraction)
    dataset = load_dataset("imagenet", data.root, "train", transform=transform)
    loader = DataLoader(dataset, batch_size=batch, num_workers=2, collate_fn=collate, persistent_workers=False)
    start = time.perf_counter()
    count = sum(len(b["id"]) for b in loader)
    return count / (time.perf_counter() - start)


def _live_rate(teacher: str, size: int, batch: int, settings: Settings) -> float:
    """Images/s of the live teacher: forward + explanation (``W(x)`` of the top-1 class) of a batch, median of 3."""
    from rightreasons.explain import attribute

    model = rr.create_model(teacher).eval().requires_grad_(False).to(settings.device)
    x = torch.rand(batch, 6, size, size, device=settings.device)
    times = alternate({"live": lambda: attribute(model, x, None, "bcos_weights", "input")}, settings,
                      1 if settings.quick else 3, 1)
    return batch / statistics.median(times["live"])


@section("e2kd-cache-imagenet")
def e2kd_cache_imagenet(settings: Settings) -> list[Row]:
    """The ImageNet rehearsal: an ImageNet-layout folder, ``rightreasons cache --format compact``, ``cache --check``
    and ``distill --frozen`` through the CLI; bytes per image, write and read (2 loader workers) images/s against the
    live teacher's forward + explanation. The ``float16`` cache it is compared with is written for the first
    :data:`FLOAT16_CLASSES` classes only (its bytes per image are fixed by the map's shape, its rates are per image):
    writing it for every class would double the section's time, which is the teacher's."""
    import tempfile

    import yaml

    classes, per_class = (10, 2) if settings.quick else (settings.imagenet_classes, settings.imagenet_images)
    teacher, size, batch = ("bcos_resnet18", 32, 8) if settings.quick else ("bcos_resnet50", 224, 16)
    with tempfile.TemporaryDirectory() as tmp:
        stats: dict[str, dict[str, float]] = {}
        for name, count in (("compact", classes), ("float16", min(classes, FLOAT16_CLASSES))):
            root = write_imagenet_folder(Path(tmp) / f"imagenet-{name}", count, per_class, size)
            config_path = Path(tmp) / f"rehearsal-{name}.yaml"
            config_path.write_text(yaml.safe_dump({
                "output_dir": str(Path(tmp) / "run"), "cpu": settings.device.type == "cpu", "max_steps": 2,
                "model": {"name": "bcos_resnet18"}, "teacher": {"name": teacher},
                "data": {"name": "imagenet", "root": str(root), "image_size": size, "batch_size": 8,
                         "eval_batch_size": 8},
                "optim": {"name": "adam", "lr": 1.0e-3, "epochs": 1}, "eval": {"num_images": 0},
                "distill": {"explanation_weight": 1.0, "crop_fraction": 0.875, "cache_format": name}}))
            cache = Path(tmp) / f"cache-{name}"
            seconds, _ = _cli(["cache", "--config", str(config_path), "--out", str(cache), "--batch-size", str(batch)])
            written = count * per_class
            stats[name] = {"images": written, "write": written / seconds, "read": _read_rate(config_path, cache, 32),
                           "bytes": sum(p.stat().st_size for p in cache.glob("shard-*.safetensors")) / written}
        config_path = Path(tmp) / "rehearsal-compact.yaml"
        _, checked = _cli(["cache", "--config", str(config_path), "--out", str(Path(tmp) / "cache-compact"),
                           "--check", "--num-images", str(min(classes * per_class, 8 if settings.quick else 32))])
        check = json.loads(checked.splitlines()[-1])
        frozen_s, _ = _cli(["distill", "--config", str(config_path), "--frozen", str(Path(tmp) / "cache-compact")])
    live = _live_rate(teacher, size, batch, settings)
    cos = check["cosine"]
    setup = (f"{classes} class folders x {per_class} JPEGs at {size} px (base view {size}/0.875), teacher {teacher} "
             f"(random weights), student bcos_resnet18; live teacher {live:.2f} images/s (forward + W(x), batch "
             f"{batch}); float16 ({stats['float16']['images']} images): {stats['float16']['bytes'] / 1e3:.1f} "
             f"KB/image, write {stats['float16']['write']:.2f} images/s, read {stats['float16']['read']:.1f} "
             f"images/s; compact: "
             f"{stats['compact']['bytes'] / 1e3:.1f} KB/image, write {stats['compact']['write']:.2f} images/s, read "
             f"{stats['compact']['read']:.1f} images/s (reads: the training loader, JPEG decode + base view + map "
             f"decode + joint crop/flip + encoding, 2 workers); cache --check on {check['images']} augmented images: "
             f"cosine compact vs lossless {cos['cached_vs_exact']['mean']:.4f} (worst "
             f"{cos['cached_vs_exact']['worst']:.4f}), compact vs live {cos['cached_vs_live']['mean']:.4f}, lossless "
             f"vs live {cos['exact_vs_live']['mean']:.4f}; distill --frozen (2 steps + validation) {frozen_s:.0f} s")
    ratio_read = stats["compact"]["read"] / live
    ratio_bytes = stats["float16"]["bytes"] / stats["compact"]["bytes"]
    return [Row("e2kd-cache-imagenet: compact read vs live teacher", 1 / stats["compact"]["read"], 1 / live,
                ratio_read, ">= 5.0", ratio_read >= 5.0, f"{setup}; seconds per image, ratio = read / live images/s"),
            Row("e2kd-cache-imagenet: float16 vs compact bytes", stats["compact"]["bytes"], stats["float16"]["bytes"],
                ratio_bytes, ">= 24", ratio_bytes >= 24, f"{setup}; columns hold bytes per image, not seconds"),
            Row("e2kd-cache-imagenet: compact vs lossless cosine", cos["cached_vs_exact"]["mean"], 1.0,
                cos["cached_vs_exact"]["mean"], ">= 0.99", cos["cached_vs_exact"]["mean"] >= 0.99,
                f"{setup}; columns hold cosine similarities, not seconds")]


def _bcosify_runs(settings: Settings, folder: Path) -> tuple[dict[str, object], dict[str, int], str]:
    """The two trainings the speed-up section races — a B-cosified standard ResNet-18 fine-tuned with the
    B-cosification recipe and a B-cos ResNet-18 from scratch with the B-cos recipe — in the setting of
    ``scripts/bcosify_study.py`` (its seed 0; ``--quick``: its smoke sizes), after training and converting the
    standard model (untimed); returns their configs, their epochs and a description of the setting."""
    import dataclasses

    import bcosify_study as study  # scripts/ is on sys.path when this script runs
    from rightreasons.classification import run_training

    s = study.Settings.quick() if settings.quick else study.Settings.full()

    def run(name: str, model: str, epochs: int, lr: float, **extra: object):
        recipe = study.training_run(s, folder / name, 0, study.SHAPES, model, epochs, lr, **extra)
        return dataclasses.replace(recipe, cpu=settings.device.type == "cpu")

    trained = run_training(run("standard", "resnet18", s.standard_epochs, 1e-3))
    converted = study.convert(Path(trained["model_file"]), folder / "bcosified.safetensors")
    configs = {"bcosified": run("bcosified", "bcosified_resnet18", s.finetune_epochs, s.finetune_lr,
                                checkpoint=converted).config(),
               "scratch": run("scratch", "bcos_resnet18", s.scratch_epochs, s.scratch_lr).config()}
    setup = (f"ResNet-18 (width {s.width}), {study.SHAPES} (one object, 6 classes), {s.size} px, batch "
             f"{s.batch_size}, the setting of scripts/bcosify_study.py (seed 0): a standard model trained, converted, "
             f"then fine-tuning the B-cosified model (ours; AdamW, lr {s.finetune_lr:g}) vs a B-cos model from "
             f"scratch (reference; Adam, lr {s.scratch_lr:g}), epochs standard / fine-tuning / from scratch "
             f"{s.standard_epochs} / {s.finetune_epochs} / {s.scratch_epochs}, BCE with off-labels at 1/C, AGC")
    return configs, {"bcosified": s.finetune_epochs, "scratch": s.scratch_epochs}, setup


@section("bcosify-speedup")
def bcosify_speedup(settings: Settings) -> list[Row]:
    """Wall time to reach the validation accuracy of a B-cos ResNet-18 trained from scratch: fine-tuning a
    B-cosified standard ResNet-18 vs training from scratch, the two trainings taking turns epoch by epoch (the
    accuracy after each epoch is measured outside the timed part)."""
    import tempfile

    from rightreasons.engine import Trainer, task_for_config

    with tempfile.TemporaryDirectory() as tmp:
        configs, epochs, setup = _bcosify_runs(settings, Path(tmp))
        trainers = {name: Trainer(task_for_config(config)(config)) for name, config in configs.items()}
        curves: dict[str, list[tuple[float, float]]] = {name: [] for name in trainers}  # (seconds so far, accuracy)
        for epoch in range(max(epochs.values())):
            for name, trainer in trainers.items():
                if epoch >= epochs[name]:
                    continue
                trainer.model.train()
                trainer.train_transform.set_epoch(epoch)
                trainer.loader.set_epoch(epoch)
                settings.sync()
                start = time.perf_counter()
                for batch in trainer.loader:
                    trainer.train_step(batch)
                settings.sync()
                elapsed = time.perf_counter() - start + (curves[name][-1][0] if curves[name] else 0.0)
                curves[name].append((elapsed, trainer.evaluate()["accuracy"]))
    target = curves["scratch"][-1][1]
    reach = {name: next((seconds for seconds, accuracy in curve if accuracy >= target), math.inf)
             for name, curve in curves.items()}
    speedup = reach["scratch"] / reach["bcosified"]
    epochs_to = {name: next((i + 1 for i, (_, a) in enumerate(c) if a >= target), None) for name, c in curves.items()}
    reached = "not reached" if epochs_to["bcosified"] is None else f"reached after {epochs_to['bcosified']}"
    return [Row("bcosify-speedup", reach["bcosified"], reach["scratch"], speedup, ">= 2.0", speedup >= 2.0,
                f"{setup}; epochs alternate; target = the from-scratch final validation accuracy "
                f"{100 * target:.1f} %, {reached} / {epochs_to['scratch']} epochs (B-cosified / from scratch); "
                "ratio = reference / ours training seconds to reach it (the standard model's training is not "
                "counted; ours = inf where the target is not reached)")]


def _sync_bn_process(rank: int, port: int, quick: bool, results: object) -> None:
    """One of the two processes of ``sync-bn-step``: DDP training steps of a B-cos ResNet-18 (uncentred BatchNorm)
    with per-process and with synchronised statistics, alternating; process 0 puts the times into ``results``."""
    import datetime

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=600))
    try:
        batch, size, repeats, warmup = _SYNC_BN_SIZES[quick]
        models = {}
        for name in ("synced", "per-process"):
            torch.manual_seed(0)
            model = rr.create_model("bcos_resnet18", num_classes=10).train()
            models[name] = DistributedDataParallel(rr.convert_sync_batchnorm(model) if name == "synced" else model)
        x = torch.rand(batch // 2, 6, size, size, generator=torch.Generator().manual_seed(rank))
        labels = F.one_hot(torch.arange(batch // 2) % 10, 10).float()

        def step(model: nn.Module) -> Callable[[], None]:
            def run() -> None:
                model.zero_grad(set_to_none=True)
                F.binary_cross_entropy_with_logits(model(x), labels).backward()
                dist.barrier()  # a step ends when both processes are done: the time of the slower one
            return run

        times: dict[str, list[float]] = {name: [] for name in models}
        for order in (("synced", "per-process"), ("per-process", "synced")):  # each goes first half of the time
            part = alternate({name: step(models[name]) for name in order}, Settings(torch.device("cpu"), quick),
                             repeats // 2, warmup)
            for name in order:
                times[name] += part[name]
        if rank == 0:
            results.put(times)
    finally:
        dist.destroy_process_group()


#: global batch, image size, repeats and warm-up rounds of ``sync-bn-step`` (by ``--quick``)
_SYNC_BN_SIZES = {True: (4, 32, 2, 1), False: (16, 64, 10, 2)}


@section("sync-bn-step")
def sync_bn_step(settings: Settings) -> list[Row]:
    """A training step on two CPU processes (DDP, gloo) with synchronised BatchNorm statistics vs per-process ones:
    the price of ``model.sync_bn`` (one all-reduce per norm layer, forward and backward)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    processes = [context.Process(target=_sync_bn_process, args=(rank, port, settings.quick, results))
                 for rank in (0, 1)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    if any(process.exitcode != 0 for process in processes) or results.empty():
        raise SystemExit(f"sync-bn-step: a process failed (exit codes {[p.exitcode for p in processes]})")
    times = results.get()
    ratio = statistics.median(s / p for s, p in zip(times["synced"], times["per-process"]))
    batch, size, repeats, _ = _SYNC_BN_SIZES[settings.quick]
    return [Row("sync-bn-step", statistics.median(times["synced"]), statistics.median(times["per-process"]), ratio,
                "<= 1.5", ratio <= 1.5,
                f"B-cos ResNet-18 (20 uncentred BatchNorms), train step (BCE forward + backward, DDP gradient "
                f"all-reduce) on 2 CPU processes (gloo, 1 thread each), global batch {batch}x6x{size}x{size}, "
                f"{repeats} alternating repeats (each first in half of them); ours = synchronised statistics "
                "(model.sync_bn), reference = per-process statistics; a step ends with a barrier (the slower "
                "process's time); ratio = median(synced / per-process), measured on process 0 (CPU always)")]


#: the networks of ``gpu-throughput``: (B-cos model, its standard twin); with ``--quick`` the smallest of each family
GPU_MODELS = {False: (("bcos_resnet50", "resnet50"), ("bcos_simple_vit_s_patch16_224", "simple_vit_s_patch16_224")),
              True: (("bcos_resnet18", "resnet18"), ("bcos_simple_vit_ti_patch16_224", "simple_vit_ti_patch16_224"))}
GPU_MODES = ("eager", "compiled", "bf16")


def _gpu_steps(bcos: nn.Module, teacher: nn.Module, x: Tensor, labels: Tensor, boxes: list[Tensor],
               box_labels: list[Tensor], layers: tuple[str, ...], compile: str) -> dict[str, Callable[[], Tensor]]:
    """The B-cos losses of ``gpu-throughput``: plain, guided at ``layers``, e²KD with the teacher's explanations
    computed live and frozen (computed once, as a cache would hold them); the guided and e²KD steps compiled whole
    with the ``torch.compile`` backend ``compile`` where they can be (:mod:`rightreasons.explain.functional`)."""
    from rightreasons.distill.explanations import teacher_outputs
    from rightreasons.distill.objective import DistillObjective

    objective = DistillObjective(method="bcos_weights", layer="input", explanation_weight=1.0, compile=compile)
    frozen = teacher_outputs(teacher, x, objective.method, objective.layer)

    def e2kd(live: bool) -> Callable[[], Tensor]:
        def loss() -> Tensor:
            bcos.zero_grad(set_to_none=True)
            outputs = teacher_outputs(teacher, x, objective.method, objective.layer) if live else frozen
            return objective(bcos, x, outputs).total
        return loss

    return {"B-cos plain": plain_loss(bcos, x, labels)} | {
        f"guided at {layer}": guided_loss(bcos, layer, x, labels, boxes, box_labels, compile) for layer in layers} | {
        "e2kd live": e2kd(True), "e2kd frozen": e2kd(False)}


def _peak_memory(settings: Settings, loss: Callable[[], Tensor]) -> float:
    """MiB: the peak allocated memory of one step on CUDA (``torch.cuda.max_memory_allocated``); elsewhere the
    activations held for its backward (:func:`saved_tensor_bytes`)."""
    if settings.device.type != "cuda":
        return saved_tensor_bytes(loss) / 2**20
    torch.cuda.reset_peak_memory_stats(settings.device)
    loss().backward()
    settings.sync()
    return torch.cuda.max_memory_allocated(settings.device) / 2**20


def _kernel_profile(settings: Settings, step_fn: Callable[[], None]) -> str:
    """Where one call of a step spends its device time (``torch.profiler``): the kernels it launched, their total
    time, and the three that took longest; on the CPU the same of the operations it profiles (self times)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = settings.device.type == "cuda"
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        step_fn()
        settings.sync()
    events = [e for e in prof.key_averages() if (e.device_type == DeviceType.CUDA) == cuda]
    seconds = (lambda e: e.self_device_time_total / 1e6) if cuda else (lambda e: e.self_cpu_time_total / 1e6)
    longest = "; ".join(f"{e.key[:50]} {seconds(e) * 1e3:.1f} ms ×{e.count}"
                        for e in sorted(events, key=seconds, reverse=True)[:3])
    return (f"{sum(e.count for e in events)} {'kernels' if cuda else 'profiled operations'}, "
            f"{sum(map(seconds, events)) * 1e3:.1f} ms (longest: {longest})")


def _compile_counts(step_fn: Callable[[], None]) -> str:
    """Two calls of a compiled step: the graphs TorchDynamo made at the first (0 where it reuses those of a step before
    it, as guided at ``final`` reuses the compiled model's) and its graph breaks, and the graphs the second, identical
    call added (recompilations, which a step must not need)."""
    from torch._dynamo.utils import counters

    counters.clear()
    step_fn()
    graphs, breaks = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    step_fn()
    return f"{graphs} graphs, {breaks} graph breaks, {counters['stats']['unique_graphs'] - graphs} recompilations"


@section("gpu-throughput")
def gpu_throughput(settings: Settings) -> list[Row]:
    """Images per second and peak memory of training steps at the papers' scale (``make bench-gpu``): ResNet-50 and
    ViT-S at 224 px, batch 32 and 64; the standard network, B-cos plain, guided at input and final, e²KD live and
    frozen; each eager, compiled (``torch.compile``) and in bf16 autocast. ``--quick``: ResNet-18 and ViT-Ti at 32 px,
    batch 2, one repeat, no compiling (a smoke test that runs on the CPU too); at full sizes it needs CUDA."""
    if settings.device.type != "cuda" and not settings.quick:
        print(f"gpu-throughput: skipped on {settings.device} (it needs CUDA: make bench-gpu)", file=sys.stderr)
        return []
    if settings.quick:
        return throughput_rows(settings, GPU_MODELS[True], (2,), 32, ("eager", "bf16"), repeats=1, warmup=1)
    return throughput_rows(settings, GPU_MODELS[False], (32, 64), 224, GPU_MODES, repeats=5, warmup=2)


def throughput_rows(settings: Settings, models: Sequence[tuple[str, str]], batches: Sequence[int], size: int,
                    modes: Sequence[str], repeats: int, warmup: int, deadline: float = math.inf) -> list[Row]:
    """The rows of ``gpu-throughput`` for each (B-cos, standard) pair of ``models``, batch size and mode (eager,
    compiled, bf16); a combination that would start after ``deadline`` (``time.monotonic()``) is left out, with a row
    that says so (``make gpu-check`` has a time budget)."""
    rows = []
    for bcos_name, standard_name in models:
        kwargs = {"num_classes": 20} | ({"image_size": size} if "vit" in bcos_name else {})
        for batch in batches:
            x, labels, boxes, box_labels = boxed_batch(batch, size, settings.device)
            for mode in modes:
                name = f"gpu-throughput: {bcos_name}, batch {batch}, {mode}"
                if time.monotonic() > deadline:
                    rows.append(Row(name, math.nan, math.nan, math.nan, "report", None, "left out: out of time",
                                    unit="img/s"))
                    continue
                torch.manual_seed(0)
                bcos = rr.create_model(bcos_name, **kwargs).train().to(settings.device)
                teacher = rr.create_model(bcos_name, **kwargs).eval().to(settings.device)
                standard = rr.create_model(standard_name, **kwargs).train().to(settings.device)
                if mode == "compiled":
                    bcos, teacher, standard = (torch.compile(m) for m in (bcos, teacher, standard))
                losses = {"standard": plain_loss(standard, x[:, :3], labels)}
                layers = ("input",) if "vit" in bcos_name else ("input", "final")  # a ViT explains at its input
                losses |= _gpu_steps(bcos, teacher, x, labels, boxes, box_labels, layers,
                                     "inductor" if mode == "compiled" else "no")
                autocast = torch.autocast(settings.device.type, torch.bfloat16, enabled=mode == "bf16")
                with autocast:
                    compiled = {name: "; " + _compile_counts(step(loss)) for name, loss in losses.items()
                                } if mode == "compiled" else {}
                    times = alternate({name: step(loss) for name, loss in losses.items()}, settings, repeats, warmup)
                    memory = {name: _peak_memory(settings, loss) for name, loss in losses.items()}
                    profiles = {name: _kernel_profile(settings, step(loss)) for name, loss in losses.items()}
                reference = batch / statistics.median(times["standard"])
                for name in losses:
                    speed = batch / statistics.median(times[name])
                    rows.append(Row(f"gpu-throughput: {bcos_name} {name}, batch {batch}, {mode}", speed, reference,
                                    speed / reference, "report", None,
                                    f"{bcos_name} (standard: {standard_name}) at {size} px, batch {batch}, {mode}: "
                                    f"{speed:.1f} images/s, peak memory {memory[name]:.0f} MiB, {profiles[name]}; "
                                    "reference = the "
                                    "standard network in the same mode; ratio = ours / reference images per second"
                                    + compiled.get(name, ""), unit="img/s"))
    return rows


# the sections of the topic modules, registered after those above (the table's order)
import bench_host_syncs  # noqa: E402,F401
import bench_launches  # noqa: E402,F401
import bench_loading  # noqa: E402,F401
import bench_metrics  # noqa: E402,F401


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME", choices=list(SECTIONS),
                        help=f"run only this section (repeatable): {', '.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test, not a measurement")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="device to run on (default: cuda when available, else cpu)")
    parser.add_argument("--threads", type=int, metavar="N", help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--imagenet-classes", type=int, default=1000, metavar="N",
                        help="class folders of the e2kd-cache-imagenet rehearsal (default 1000)")
    parser.add_argument("--imagenet-images", type=int, default=2, metavar="N",
                        help="JPEGs per class folder of the e2kd-cache-imagenet rehearsal (default 2)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        print(f"no CUDA device: torch {torch.__version__} sees none (torch.cuda.is_available() is False), so "
              f"--device {args.device} measures nothing; run it on a machine with a GPU")
        return 0
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    settings = Settings(torch.device(args.device), args.quick, args.imagenet_classes, args.imagenet_images)
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
