"""One-call distillation runs for the demo (``make demo``) and benchmarks on the synthetic benchmark.

:func:`run_distillation` distils a teacher model file (e.g. the Energy-guided teacher of the guidance demo) into a
small B-cos student with plain KD, live e²KD or e²KD with frozen explanations, evaluates it on the balanced test
split (all four groups) and returns the metrics. :func:`compare_step_times` times training steps and batch loading
of several configurations side by side (live vs frozen e²KD in ``make bench``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import torch

from ..engine import from_dict
from .schema import DistillConfig
from .trainer import DistillTrainer, distill, write_teacher_cache

__all__ = ["MODES", "compare_step_times", "run_distillation"]

MODES = ("kd", "e2kd", "e2kd_frozen")


def run_distillation(teacher_model_file: str | Path, *, mode: Literal["kd", "e2kd", "e2kd_frozen"],
                     output_dir: str | Path, student: str = "bcos_cifar10_resnet20",
                     student_kwargs: Mapping[str, Any] | None = None, data: str = "synthetic-birds",
                     data_root: str | None = None, data_options: Mapping[str, Any] | None = None,
                     image_size: int = 64, batch_size: int = 32, epochs: int = 10, max_steps: int | None = None,
                     lr: float = 1e-3, temperature: float = 1.0, explanation_weight: float = 5.0, seed: int = 0,
                     cache_dir: str | Path | None = None, test_split: str | None = "test", cpu: bool = True,
                     overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Distil ``teacher_model_file`` (a ``model.safetensors`` written by rightreasons training) into ``student``.

    Args:
        mode: ``kd`` (λ = 0), ``e2kd`` (live teacher explanations, λ = ``explanation_weight``, default 5 from the
            paper's B-cos Waterbirds grid {1, 5, 10}) or ``e2kd_frozen``
            (explanations cached once in ``cache_dir``, default ``output_dir/../teacher-cache``, then reused:
            share one ``cache_dir`` across seeds and it is written once).
        output_dir: the run's directory (checkpoints, ``metrics.jsonl``, ``model.safetensors``, ``summary.json``).
        student, student_kwargs: the student's registry name and constructor arguments.
        data, data_root, data_options: the distillation data (``data.options``, e.g. ``{"n": 500, "size": 64}``
            for the synthetic sets); its validation split is used during training and ``test_split`` at the end.
        image_size, batch_size, epochs, max_steps, lr: the schedule (Adam, cosine without warm-up, AGC).
        temperature: τ of the KD term.
        seed: the run's seed (data order, augmentation, student initialisation).
        overrides: further config keys as a nested mapping merged over the built config (e.g.
            ``{"eval": {"localization": False}}``).

    Returns:
        ``{"mode", "seed", "model_file", "cache_dir", "steps", "seconds", "val": last validation metrics,
        "test": test metrics}`` — the test metrics hold ``accuracy``, ``accuracy/<group>``, ``agreement``,
        ``agreement/<group>``, ``ood_accuracy``, ``ood_agreement``, ``id_accuracy``, ``id_agreement``,
        ``explanation_similarity``, ``teacher_accuracy`` and ``epg``/``iou`` of the student's explanations.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {list(MODES)}")
    output_dir = Path(output_dir)
    raw: dict[str, Any] = {
        "output_dir": str(output_dir), "seed": seed, "cpu": cpu, "max_steps": max_steps, "log_every": 10,
        "model": {"name": student, "kwargs": dict(student_kwargs or {})},
        "teacher": {"checkpoint": str(teacher_model_file)},
        "data": {"name": data, "root": data_root, "image_size": image_size, "batch_size": batch_size,
                 "options": dict(data_options or {})},
        "optim": {"name": "adam", "lr": lr, "schedule": "cosine", "epochs": epochs},
        "eval": {"every_epochs": epochs, "num_images": 0},
        "checkpoint": {"keep_last": 1},
        "distill": {"temperature": temperature, "explanation_weight": 0.0 if mode == "kd" else explanation_weight,
                    "test_split": test_split},
    }
    cache = None
    if mode == "e2kd_frozen":
        cache = Path(cache_dir) if cache_dir is not None else output_dir.parent / "teacher-cache"
        raw["distill"]["frozen"] = str(cache)
    _merge(raw, overrides or {})
    config = from_dict(DistillConfig, raw)
    if cache is not None:
        write_teacher_cache(config, cache)
    summary = distill(config)
    return {"mode": mode, "seed": seed, "model_file": str(output_dir / "model.safetensors"),
            "cache_dir": None if cache is None else str(cache), "steps": summary["steps"],
            "seconds": summary["seconds"], "val": summary["history"][-1] if summary["history"] else {},
            "test": summary.get("test", {})}


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def compare_step_times(configs: Mapping[str, DistillConfig], steps: int = 10,
                       warmup: int = 2) -> dict[str, dict[str, float]]:
    """Mean wall-clock seconds of a training step (forward, teacher or cache, backward, optimiser) and of loading its
    batch, for each of ``configs`` (e.g. ``{"live": ..., "frozen": ...}``), over ``steps`` steps after ``warmup``
    untimed ones. The trainers take turns step by step, so that drifts of a shared machine hit all alike.

    Returns per name ``{"step_seconds", "loader_seconds", "loader_fraction"}`` (loading / (loading + step))."""
    trainers = {name: DistillTrainer(config) for name, config in configs.items()}
    batches = {name: _endless(trainer.loader) for name, trainer in trainers.items()}
    loading = dict.fromkeys(trainers, 0.0)
    stepping = dict.fromkeys(trainers, 0.0)
    for i in range(warmup + steps):
        for name, trainer in trainers.items():
            trainer.model.train()
            _synchronize(trainer.accelerator.device)
            start = time.perf_counter()
            batch = next(batches[name])
            loaded = time.perf_counter()
            trainer.train_step(batch)
            _synchronize(trainer.accelerator.device)
            if i >= warmup:
                loading[name] += loaded - start
                stepping[name] += time.perf_counter() - loaded
    return {name: {"step_seconds": stepping[name] / steps, "loader_seconds": loading[name] / steps,
                   "loader_fraction": loading[name] / (loading[name] + stepping[name])} for name in trainers}


def _endless(loader: Iterable[Any]) -> Iterator[Any]:
    while True:
        yield from loader


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
