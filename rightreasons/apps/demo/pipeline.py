"""The demo as a list of stages sharing one context; each stage adds its numbers and its section of the report.

A stage is a function ``stage(ctx: DemoContext) -> None``. It may read what earlier stages left (``ctx.models``: model
files per name and seed; ``ctx.results``) and adds its own: numbers under ``ctx.results[<key>]`` (JSON-serialisable,
written to ``results.json``), figures under ``ctx.out / "figures"``, and Markdown sections with
:meth:`DemoContext.add_section` (written to ``report.md`` in stage order). :func:`run_stages` runs the stages, times
them and writes both files. A later stage (e.g. e²KD distillation from the guided models) is appended to the list.
"""

from __future__ import annotations

import json
import logging
import math
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...console import count
from ...version import __version__
from ...data import AnnotatedDataset, load_dataset, transforms_for
from ...fileio import writable_directory, write_text_atomic
from .settings import DemoSettings

__all__ = ["DATASET", "DemoContext", "Stage", "run_stages"]

logger = logging.getLogger(__name__)

#: the benchmark every stage trains and evaluates on
DATASET = "synthetic-birds"


@dataclass
class DemoContext:
    """What the stages share: where to write, the settings, the numbers and report sections so far, the models."""

    out: Path
    settings: DemoSettings
    results: dict[str, Any] = field(default_factory=dict)
    sections: list[tuple[str, str]] = field(default_factory=list)
    models: dict[str, list[Path]] = field(default_factory=dict)
    _test_set: AnnotatedDataset | None = field(default=None, repr=False)

    def add_section(self, title: str, body: str) -> None:
        """Append a ``## title`` section to the report."""
        self.sections.append((title, body.strip() + "\n"))

    def benchmark(self, checks: list[dict[str, Any]]) -> str:
        """The benchmark checks as a Markdown list under a **Benchmark** heading: ✓ passed, ✗ failed, with the value
        (means, p.p.). In a smoke run (``settings.smoke``, ``--quick``) the heading and every ✗ say that the run is
        too small for the checks to mean anything."""
        smoke = self.settings.smoke
        heading = "**Benchmark** (means, p.p.)" + (
            ": *smoke run* (`--quick`: one seed, few images and epochs) — it only shows that every stage runs; the "
            "checks need the full demo, and ✗ here says nothing about the method" if smoke else "") + ":\n"
        lines = [f"- {'✓' if c['passed'] else '✗'} {c['check']}: {c['value']:+.1f}"
                 + (" (smoke run)" if smoke and not c["passed"] else "") for c in checks]
        return "\n".join([heading, *lines])

    @property
    def device(self) -> torch.device:
        """Where evaluations run: the GPU when there is one."""
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def test_set(self, model: nn.Module | None = None) -> AnnotatedDataset:
        """The balanced test split (loaded once); with ``model``, its samples are transformed for that model
        (:func:`~rightreasons.data.transforms_for`)."""
        if self._test_set is None:
            s = self.settings
            self._test_set = load_dataset(DATASET, None, "test", **s.dataset_options("test"))
        if model is not None:
            self._test_set.transform = transforms_for(model, self.settings.image_size, crop_fraction=1.0)
        return self._test_set


#: one step of the demo
Stage = Callable[[DemoContext], None]


def _check_finite(value: Any, where: str = "results") -> None:
    """Refuse NaN/Inf anywhere in the results (JSON has no representation for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} is {value}; the demo's numbers must be finite")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite(v, f"{where}[{i}]")


def _report(ctx: DemoContext) -> str:
    s, timing = ctx.settings, ctx.results["timing"]
    lines = ["# rightreasons demo: model guidance on a synthetic Waterbirds-like benchmark\n",
             f"`{DATASET}` at {s.image_size} px: a disc (landbird) or a triangle (waterbird) on a land or water "
             f"background. In training the background matches the class in "
             f"{s.data.correlation:.0%} of the images (100 % in Waterbirds-100), a shortcut "
             "easier to learn than the shape; the validation split (which chooses every checkpoint) and the test "
             f"split ({count(s.recipe.test_images, 'image')}, only reported) are balanced over the groups "
             "G1 landbird/land, "
             "G2 landbird/water, G3 waterbird/land, G4 waterbird/water. "
             f"Mean ± std over {s.seeds} seed(s); all numbers are also in `results.json`.\n"]
    for title, body in ctx.sections:
        lines += [f"## {title}\n", body]
    stages = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timing["stages"].items())
    lines += ["## Run\n", f"{timing['total_seconds']:.0f} s in all ({stages}); torch {torch.__version__}, "
              f"{torch.get_num_threads()} thread(s), {platform.machine()}, rightreasons {__version__}.\n"]
    return "\n".join(lines)


def run_stages(out: str | Path, settings: DemoSettings, stages: Sequence[Stage]) -> dict[str, Any]:
    """Run ``stages`` in order and write ``out/results.json`` and ``out/report.md``; returns the results."""
    ctx = DemoContext(Path(out), settings)
    writable_directory(ctx.out)
    ctx.results["settings"] = settings.to_dict()
    start, timings = time.time(), {}
    for stage in stages:
        began = time.time()
        logger.info("stage %s", stage.__name__)
        stage(ctx)
        timings[stage.__name__] = round(time.time() - began, 1)
    ctx.results["timing"] = {"total_seconds": round(time.time() - start, 1), "stages": timings,
                             "threads": torch.get_num_threads()}
    _check_finite(ctx.results)
    write_text_atomic(ctx.out / "results.json", json.dumps(ctx.results, indent=2) + "\n")
    write_text_atomic(ctx.out / "report.md", _report(ctx))
    logger.info("report: %s (%.0f s)", ctx.out / "report.md", ctx.results["timing"]["total_seconds"])
    return ctx.results
