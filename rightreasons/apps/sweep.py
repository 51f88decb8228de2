"""Sweeps: expand a grid of training runs, run them one after another and collect a Pareto table and plot
(``rightreasons sweep``)::

    rightreasons sweep configs/guidance/grids/guidance.yaml --dry-run        # print the commands
    rightreasons sweep configs/guidance/grids/guidance.yaml --only voc2007/   # run (resumes, skips done runs)
    rightreasons sweep configs/guidance/grids/guidance.yaml --launcher "accelerate launch --num_processes 8"
    rightreasons sweep configs/guidance/grids/*.yaml --collect-only --report runs/reports/all
    rightreasons sweep configs/guidance/grids/guidance.yaml --set data.root=/scratch/voc   # for every run

A run is ``rightreasons <train|guide> --config BASE key=value ... output_dir=OUTPUT_ROOT/NAME``; ``extra`` overrides
(``--set``) follow the grid's own, so they win. Before anything runs, every run's config is loaded and validated
(:func:`rightreasons.apps.tasks.load_task_config`), so a typo fails at once. Runs whose folder holds a ``summary.json``
are skipped; runs with checkpoints but no summary continue with ``--resume``.

Collecting reads every run's validation history (``summary.json``) into points (one per run and evaluation), marks per
group the Pareto front over (score = F1 or accuracy, EPG, IoU) and the representative model (highest EPG within 5 p.p.
of the best score) and writes ``pareto.md``, ``pareto.csv`` and ``pareto.png`` to the report folder.

Grid files (YAML; documented in ``configs/guidance/README.md``)::

    command: guide                    # train | guide | distill, the rightreasons sub-command
    base: ../voc2007.yaml             # base config, relative to the grid file
    output_root: runs                 # each run writes to <output_root>/<name>
    name: "{dataset}/{guidance.loss}-w{guidance.weight}"   # {key}: an axis label or any config key (dotted)
    group: "{dataset}/{guidance.loss}"                      # the points that share one Pareto front
    overrides: {guidance.layer: input}                      # fixed overrides of every run
    grid:                             # blocks; each expands to the product of its axes, the runs are their union
      - dataset:                      # a mapping = a named axis; each value is a bundle of settings
          voc2007: {base: ../voc2007.yaml}
          coco2014: {base: ../coco2014.yaml, optim.epochs: 60}
        guidance.loss: energy         # a scalar = one value
        guidance.weight: [5.0e-4, 1.0e-3]   # a list = an axis (a list-valued key: [[a, b]])

``base``, ``command``, ``name`` and ``group`` may be set at the top, in a block or in a bundle (the later wins); every
other key is a dotted config key.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..config import read_yaml, to_dict
from ..engine import task_names
from ..engine.grid import GridRun, run_grid
from ..errors import ConfigError
from ..fileio import writable_directory, write_text_atomic
from ..reporting import OBJECTIVES, mark_fronts, markdown_table, plot_pareto, write_csv
from .tasks import load_task_config

__all__ = ["GridError", "Run", "collect", "execute", "load_grid", "write_report"]

logger = logging.getLogger(__name__)

RUN_KEYS = ("base", "command", "name", "group")
GRID_KEYS = (*RUN_KEYS, "output_root", "overrides", "grid")
_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


class GridError(ConfigError):
    """A grid file that cannot be expanded; the message names the file, the block and the problem."""


@dataclass(frozen=True)
class Run(GridRun):
    """One run of a sweep, a run of the grid runner (:class:`~rightreasons.engine.grid.GridRun`) that is launched
    as ``rightreasons <command> --config <base> <overrides> output_dir=<output_dir>``; ``group`` names the Pareto
    front it belongs to."""

    group: str = ""
    command: str = "train"
    base: Path = Path()
    overrides: tuple[str, ...] = ()

    @classmethod
    def load(cls, name: str, group: str, command: str, base: Path, overrides: Sequence[str], output_dir: Path,
             params: Mapping[str, Any] | None = None) -> Run:
        """The run with its config validated, exactly as its command would load it."""
        overrides = (*overrides, f"output_dir={_yaml_value(str(output_dir))}")
        return cls(name, load_task_config(command, base, list(overrides)), dict(params or {}), group, command, base,
                   overrides)

    def argv(self, launcher: Sequence[str], resume: bool = False) -> list[str]:
        """The command line; ``launcher`` runs a module (``python``, ``accelerate launch``, ``torchrun``)."""
        return [*launcher, "-m", "rightreasons", self.command, "--config", str(self.base), *self.overrides,
                *(["--resume"] if resume else [])]


def _yaml_value(value: Any) -> str:
    """``value`` as the YAML text that ``key=value`` overrides parse back to the same value."""
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf).strip()
    return text[:-3].strip() if text.endswith("\n...") else text


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _render(template: str, values: Mapping[str, Any], where: str) -> str:
    def replace(match: re.Match) -> str:
        key = match.group(1)
        if key not in values:
            raise GridError(f"{where}: {{{key}}} is neither an axis nor a config key")
        return str(values[key])
    return _PLACEHOLDER.sub(replace, template)


def _axes(block: Mapping[str, Any], where: str) -> list[list[tuple[str, str | None, dict[str, Any]]]]:
    """Per block key, its values as ``(key, label, settings)``: named bundles, list items or one scalar."""
    axes = []
    for key, value in block.items():
        if isinstance(value, Mapping):
            if not value or not all(isinstance(b, Mapping) for b in value.values()):
                raise GridError(f"{where}: axis {key!r} must map labels to bundles of settings, got {value!r} "
                                "(set mapping-valued config keys through dotted keys)")
            axes.append([(key, str(label), dict(bundle)) for label, bundle in value.items()])
        elif isinstance(value, list):
            if not value:
                raise GridError(f"{where}: axis {key!r} is empty")
            axes.append([(key, None, {key: v}) for v in value])
        else:
            axes.append([(key, None, {key: value})])
    return axes


def _merge(target: dict[str, Any], settings: Mapping[str, Any], where: str, taken: set[str]) -> None:
    for key, value in settings.items():
        if key in taken:
            raise GridError(f"{where}: {key!r} is set by two axes of the same block")
        taken.add(key)
        target[key] = value


def load_grid(path: str | Path, extra: Sequence[str] = ()) -> list[Run]:
    """Expand a grid file into its runs (configs validated); ``GridError`` / ``ConfigError`` name the problem.
    ``extra``: ``key=value`` overrides appended to every run's (they win over the grid's settings)."""
    path = Path(path)
    if not path.is_file():
        raise GridError(f"grid file not found: {path}")
    try:
        spec = read_yaml(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, ValueError) as e:
        raise GridError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(spec, Mapping):
        raise GridError(f"{path}: expected a mapping with keys {list(GRID_KEYS)}")
    unknown = sorted(set(spec) - set(GRID_KEYS))
    if unknown:
        raise GridError(f"{path}: unknown key(s) {unknown}; valid: {list(GRID_KEYS)}")
    blocks = spec.get("grid")
    if not isinstance(blocks, list) or not blocks or not all(isinstance(b, Mapping) for b in blocks):
        raise GridError(f"{path}: 'grid' must be a non-empty list of blocks (mappings of axes)")
    fixed = dict(spec.get("overrides") or {})
    defaults = {k: spec[k] for k in RUN_KEYS if k in spec}
    root = Path(spec.get("output_root", "runs"))
    runs: list[Run] = []
    for i, block in enumerate(blocks):
        where = f"{path}: grid[{i}]"
        for combo in itertools.product(*_axes(block, where)):
            settings, overrides, labels, taken = dict(defaults), dict(fixed), {}, set()
            for key, label, bundle in combo:
                if label is not None:
                    labels[key] = label
                _merge(settings, {k: v for k, v in bundle.items() if k in RUN_KEYS}, where, taken)
                _merge(overrides, {k: v for k, v in bundle.items() if k not in RUN_KEYS}, where, taken)
            missing = [k for k in RUN_KEYS if k not in settings]
            if missing:
                raise GridError(f"{where}: no {missing} for a run (set them at the top, in the block or a bundle)")
            if settings["command"] not in task_names():
                raise GridError(f"{where}: command {settings['command']!r} is not one of {task_names()}")
            base = Path(os.path.normpath(path.parent / str(settings["base"])))
            items = (*(f"{k}={_yaml_value(v)}" for k, v in overrides.items()), *extra)
            probe = Run.load("", "", settings["command"], base, items, root)
            values = {**_flatten(to_dict(probe.config)), **labels}
            name = _render(str(settings["name"]), values, where)
            params = {**{k: v for k, v in overrides.items() if k not in fixed}, **labels}
            runs.append(Run.load(name, _render(str(settings["group"]), values, where), settings["command"], base,
                                 items, root / name, params))
    seen: dict[str, Path] = {}
    for run in runs:
        if run.output_dir in seen.values():
            raise GridError(f"{path}: two runs write to {run.output_dir}; make 'name' tell them apart")
        seen[run.name] = run.output_dir
    return runs


def collect(runs: Sequence[Run]) -> tuple[list[dict[str, Any]], list[str]]:
    """Points of every evaluation in the runs' ``summary.json`` histories, and the names of runs without one."""
    points, missing = [], []
    for run in runs:
        summary_file = run.output_dir / "summary.json"
        if not summary_file.is_file():
            missing.append(run.name)
            continue
        try:
            history = json.loads(summary_file.read_text())["history"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ConfigError(f"{summary_file}: not a training summary with a 'history' ({e})") from e
        for record in history:
            if any(not isinstance(record.get(k), (int, float)) for k in OBJECTIVES):
                continue
            checkpoint = run.output_dir / "checkpoints" / f"step-{record['step']:06d}"
            points.append({"id": f"{run.name}@{record['step']}", "group": run.group, "run": run.name,
                           "epoch": record.get("epoch"), "step": record["step"],
                           **{k: float(record[k]) for k in OBJECTIVES},
                           "checkpoint": str(checkpoint) if checkpoint.is_dir() else "", **run.params})
    return points, missing


def write_report(points: Sequence[dict[str, Any]], missing: Sequence[str], out: str | Path,
                 title: str = "Pareto report") -> dict[str, Path]:
    """``pareto.md`` (per-group summary and fronts), ``pareto.csv`` (every point) and ``pareto.png`` in ``out``."""
    out = writable_directory(out, "report folder")
    marked = mark_fronts(points)
    params = list(dict.fromkeys(k for p in marked for k in p if k not in ("id", "group", "run", "epoch", "step",
                                                                          "checkpoint", "on_front",
                                                                          "representative", *OBJECTIVES)))
    columns = ["group", "run", "epoch", "step", *OBJECTIVES, "on_front", "representative", *params, "checkpoint"]
    write_csv(out / "pareto.csv", marked, columns)
    summary = []
    for group in dict.fromkeys(p["group"] for p in marked):
        members = [p for p in marked if p["group"] == group]
        best = max(members, key=lambda p: p["score"])
        pick = next(p for p in members if p["representative"])
        summary.append({"group": group, "runs": len({p["run"] for p in members}), "evaluations": len(members),
                        "best score": f"{best['score']:.4f} ({best['id']})", "representative": pick["id"],
                        "score": pick["score"], "epg": pick["epg"], "iou": pick["iou"]})
    front = sorted((p for p in marked if p["on_front"]), key=lambda p: (p["group"], -p["score"]))
    text = [f"# {title}\n", f"{len(marked)} evaluations of {len({p['run'] for p in marked})} runs. Representative: "
            "the highest EPG within 5 p.p. of the group's best score (thesis §7.2).\n", "## Groups\n",
            markdown_table(summary, ["group", "runs", "evaluations", "best score", "representative", "score", "epg",
                                     "iou"], ["group", "runs", "evaluations", "best score (run@step)",
                                              "representative (run@step)", "score", "EPG", "IoU"]),
            "\n## Pareto fronts over (score, EPG, IoU)\n",
            markdown_table(front, ["group", "run", "epoch", "step", "score", "epg", "iou", "representative",
                                   "checkpoint"]),
            "\n![Pareto plot](pareto.png)\n"]
    if missing:
        text.append("\n## Runs without a summary\n\n" + "".join(f"- {name}\n" for name in missing))
    write_text_atomic(out / "pareto.md", "\n".join(text))
    plot_pareto(out / "pareto.png", marked, [("epg", "score"), ("iou", "score")], title=title)
    return {"markdown": out / "pareto.md", "csv": out / "pareto.csv", "plot": out / "pareto.png"}


def execute(runs: Sequence[Run], launcher: Sequence[str]) -> list[str]:
    """Run ``runs`` one after another through the grid runner (:func:`~rightreasons.engine.grid.run_grid`: finished
    ones are kept, interrupted ones resume), each as a command under ``launcher``; the names of failed runs."""
    def launch(run: GridRun, resume: bool) -> bool:
        argv = run.argv(launcher, resume)  # type: ignore[attr-defined]
        logger.info("%s: %s", run.name, shlex.join(argv))
        return subprocess.run(argv, check=False).returncode == 0

    outcomes = run_grid(runs, launch)
    return [name for name, outcome in outcomes.items() if outcome.status == "failed"]
