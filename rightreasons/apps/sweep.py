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

The report follows the protocol "select on validation, report on test": it reads every run's validation history
(``summary.json``), averages the runs of one *setting* (runs that differ only in ``seed``) step by step, marks per
group the Pareto front over the validation (score = F1 or accuracy, EPG, IoU) and the representative (highest EPG
within 5 p.p. of the best score), and only then scores each seed of the representative once on the test split (from
its checkpoint, :func:`~rightreasons.engine.artifacts.locate_artifact`; worst-group and per-group accuracy where the
data has groups). It writes ``pareto.md``, ``pareto.csv`` and ``pareto.png`` to the report folder.

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
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..config import read_yaml, to_dict, yaml_value
from ..console import count
from ..data import default_test_split
from ..engine import task_names
from ..engine.grid import GridRun, run_grid
from ..errors import ConfigError, RightReasonsError
from ..fileio import writable_directory, write_json_atomic, write_text_atomic
from ..reporting import OBJECTIVES, cell, mark_fronts, markdown_table, plot_pareto, statistic, write_csv
from .tasks import load_task_config

__all__ = ["GridError", "Run", "aggregate", "collect", "execute", "load_grid", "report_runs", "score_representatives",
           "write_report"]

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
        overrides = (*overrides, f"output_dir={yaml_value(str(output_dir))}")
        return cls(name, load_task_config(command, base, list(overrides)), dict(params or {}), group, command, base,
                   overrides)

    def argv(self, launcher: Sequence[str], resume: bool = False) -> list[str]:
        """The command line; ``launcher`` runs a module (``python``, ``accelerate launch``, ``torchrun``)."""
        return [*launcher, "-m", "rightreasons", self.command, "--config", str(self.base), *self.overrides,
                *(["--resume"] if resume else [])]


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
            axes.append([(key, _plain_label(label, key, where), dict(bundle)) for label, bundle in value.items()])
        elif isinstance(value, list):
            if not value:
                raise GridError(f"{where}: axis {key!r} is empty")
            axes.append([(key, None, {key: v}) for v in value])
        else:
            axes.append([(key, None, {key: value})])
    return axes


def _plain_label(label: Any, key: str, where: str) -> str:
    """``label`` of a bundle of axis ``key`` as a string, when it is a plain name: a run's directory is named from
    labels, so ``../../x`` would put a run outside the output root and ``b/../a`` would share the directory of ``a``."""
    text = str(label)
    if not text.strip() or text in (".", "..") or any(c in text for c in "/\\\x00"):
        raise GridError(f"{where}: label {text!r} of axis {key!r} is not a plain name; expected a name without '/', "
                        "'\\' or NUL that is not '.' or '..'")
    return text


def _run_name(name: str, where: str) -> str:
    """``name`` rendered for a run, when it is a relative path of plain parts (no ``.``, ``..`` or empty part): the
    run's directory is ``output_root / name``, inside the root and different from every other name's."""
    parts = name.replace("\\", "/").split("/")
    if "\x00" in name or any(part in ("", ".", "..") for part in parts):
        raise GridError(f"{where}: run name {name!r} is not a relative path of plain names (it starts with '/', or "
                        "holds an empty, '.' or '..' part); the run must write inside output_root, to a directory of "
                        "its own")
    return name


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
            items = (*(f"{k}={yaml_value(v)}" for k, v in overrides.items()), *extra)
            probe = Run.load("", "", settings["command"], base, items, root)
            values = {**_flatten(to_dict(probe.config)), **labels}
            name = _run_name(_render(str(settings["name"]), values, where), where)
            params = {**{k: v for k, v in overrides.items() if k not in fixed}, **labels}
            runs.append(Run.load(name, _render(str(settings["group"]), values, where), settings["command"], base,
                                 items, root / name, params))
    seen: dict[str, Path] = {}
    for run in runs:
        if run.output_dir in seen.values():
            raise GridError(f"{path}: two runs write to {run.output_dir}; make 'name' tell them apart")
        seen[run.name] = run.output_dir
    return runs


def _setting_labels(runs: Sequence[Run]) -> dict[str, str]:
    """Per run name, the label of its *setting*: the runs of one group that differ only in ``seed`` share it. A
    setting of one run is labelled by the run's name, one of several seeds by its group and the parameters that set
    it apart from the group's other settings."""
    settings: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        key = json.dumps({k: v for k, v in run.params.items() if k != "seed"}, sort_keys=True, default=str)
        settings.setdefault((run.group, key), []).append(run)
    labels = {}
    for (group, key), members in settings.items():
        if len(members) == 1:
            labels[members[0].name] = members[0].name
            continue
        siblings = [json.loads(k) for g, k in settings if g == group]
        mine = json.loads(key)
        varying = [k for k in mine if any(s.get(k) != mine[k] for s in siblings)]
        label = group + (f" ({', '.join(f'{k}={mine[k]}' for k in varying)})" if varying else "")
        for run in members:
            labels[run.name] = label
    return labels


def collect(runs: Sequence[Run]) -> tuple[list[dict[str, Any]], list[str]]:
    """Points of every validation in the runs' ``summary.json`` histories (one per run and evaluation, with the run's
    ``setting`` label and ``seed``), and the names of runs without a summary."""
    points, missing = [], []
    labels = _setting_labels(runs)
    for run in runs:
        summary_file = run.output_dir / "summary.json"
        if not summary_file.is_file():
            missing.append(run.name)
            continue
        try:
            summary = json.loads(summary_file.read_text())
            history = summary["history"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ConfigError(f"{summary_file}: not a training summary with a 'history' ({e})") from e
        for record in history:
            if any(not isinstance(record.get(k), (int, float)) for k in OBJECTIVES):
                continue
            checkpoint = run.output_dir / "checkpoints" / f"step-{record['step']:06d}"
            exported = summary.get("exported_step") == record["step"]
            artefact = checkpoint if checkpoint.is_dir() else run.output_dir if exported else None
            points.append({"id": f"{run.name}@{record['step']}", "group": run.group, "run": run.name,
                           "setting": labels[run.name], "seed": run.config.seed, "epoch": record.get("epoch"),
                           "step": record["step"], **{k: float(record[k]) for k in OBJECTIVES},
                           "checkpoint": str(artefact) if artefact else "", **run.params})
    return points, missing


def aggregate(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per setting and step that every seed of the setting evaluated: the mean of each objective over the
    seeds (``<objective>_std``: their sample std), ``seeds`` and the per-seed ``members``."""
    by_setting: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in points:
        by_setting.setdefault((p["group"], p["setting"]), []).append(p)
    out = []
    for (group, setting), members in by_setting.items():
        seeds = {p["run"] for p in members}
        steps = [s for s in dict.fromkeys(p["step"] for p in members)
                 if {p["run"] for p in members if p["step"] == s} == seeds]
        for step in steps:
            here = [p for p in members if p["step"] == step]
            point = {"id": f"{setting}@{step}", "group": group, "setting": setting, "step": step,
                     "epoch": here[0]["epoch"], "seeds": len(here), "members": here}
            for k in OBJECTIVES:
                stat = statistic([p[k] for p in here])
                point[k], point[f"{k}_std"] = stat["mean"], stat["std"]
            point.update({k: v for k, v in here[0].items() if k not in point and k not in (
                "run", "seed", "checkpoint", *(f"{o}_std" for o in OBJECTIVES))})
            out.append(point)
    return out


def score_representatives(marked: Sequence[dict[str, Any]], runs: Sequence[Run], split: str | None,
                          score: Callable[[Run, Path, str], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per group, the test scores of its representative (chosen on validation): every seed's artefact of the chosen
    step scored once on ``split`` (``None``: each dataset's test split) by ``score(run, artefact, split)``, kept in
    ``<run>/test-<split>-step-<N>.json`` so that a second report does not score again. Groups whose artefacts were
    not kept (or cannot be scored) get the reason instead of numbers."""
    by_name = {run.name: run for run in runs}
    results = {}
    for pick in (p for p in marked if p["representative"]):
        scores, problems = [], []
        for member in pick["members"]:
            run = by_name[member["run"]]
            where = split or default_test_split(run.config.data.name)
            if not member["checkpoint"]:
                problems.append(f"{member['id']}: its checkpoint was not kept (raise checkpoint.keep_front)")
                continue
            kept = run.output_dir / f"test-{where}-step-{member['step']:06d}.json"
            try:
                record = json.loads(kept.read_text()) if kept.is_file() else None
                if record is None:
                    record = score(run, Path(member["checkpoint"]), where)
                    write_json_atomic(kept, record)
            except RightReasonsError as e:
                problems.append(f"{member['id']}: {e}")
                continue
            scores.append({**record, "selection_split": run.config.data.val_split})
        results[pick["group"]] = {"pick": pick, "scores": scores, "problems": problems}
    return results


def _test_row(group: str, entry: dict[str, Any]) -> dict[str, Any]:
    pick, scores = entry["pick"], entry["scores"]
    row: dict[str, Any] = {"group": group, "representative": pick["id"], "seeds": pick["seeds"],
                           **{f"val. {k}": cell({"mean": pick[k], "std": pick[f"{k}_std"]}) for k in OBJECTIVES}}
    if scores:
        row["split"] = ", ".join(sorted({s["split"] for s in scores}))
        keys = [k for k in ("score", "epg", "iou", "worst_group_accuracy") if all(k in s for s in scores)]
        keys += sorted({k for s in scores for k in s if k.startswith("accuracy/") and all(k in t for t in scores)})
        row.update({f"test {k}": cell(statistic([s[k] for s in scores])) for k in keys})
        if len(scores) < pick["seeds"]:
            row["split"] += f" ({len(scores)} of {pick['seeds']} seeds)"
    return row


def write_report(points: Sequence[dict[str, Any]], missing: Sequence[str], out: str | Path,
                 title: str = "Pareto report", tests: dict[str, dict[str, Any]] | None = None) -> dict[str, Path]:
    """``pareto.md`` (per group the representative, chosen on validation and scored on test, and the fronts),
    ``pareto.csv`` (every setting and step, seeds aggregated) and ``pareto.png`` in ``out``; ``points`` are
    :func:`aggregate`'s with :func:`~rightreasons.reporting.mark_fronts`'s flags, ``tests`` from
    :func:`score_representatives` (``None``: not scored)."""
    out = writable_directory(out, "report folder")
    params = list(dict.fromkeys(k for p in points for k in p if k not in (
        "id", "group", "setting", "epoch", "step", "seeds", "members", "on_front", "representative", *OBJECTIVES,
        *(f"{o}_std" for o in OBJECTIVES))))
    columns = ["group", "setting", "epoch", "step", "seeds", *(x for o in OBJECTIVES for x in (o, f"{o}_std")),
               "on_front", "representative", *params]
    write_csv(out / "pareto.csv", points, columns)
    rows = [_test_row(group, entry) for group, entry in (tests or {}).items()]
    test_columns = list(dict.fromkeys(k for r in rows for k in r))
    front = sorted((p for p in points if p["on_front"]), key=lambda p: (p["group"], -p["score"]))
    front_rows = [{**p, **{k: cell({"mean": p[k], "std": p[f"{k}_std"]}) for k in OBJECTIVES}} for p in front]
    runs = len({m["run"] for p in points for m in p["members"]})
    text = [f"# {title}\n",
            f"{count(len(points), 'validation')} (settings × steps, mean ± std over seeds) of {count(runs, 'run')}. "
            "Representative: "
            "per group, the setting and step with the highest validation EPG within 5 p.p. of the group's best "
            "validation score (thesis §7.2), chosen on the validation split only; then each of its seeds is scored "
            "once on the test split. Values in %.\n", "## Representatives\n"]
    if rows:
        text.append(markdown_table(rows, test_columns))
        shared = sorted({s["split"] for e in (tests or {}).values() for s in e["scores"]
                         if s["split"] == s["selection_split"]})
        if shared:
            text.append(f"\nNote: split(s) {shared} also selected the checkpoints: these numbers are not held out "
                        "(where a dataset has no test labels, select on a held-out part of its training data, e.g. "
                        "COCO 2014's data.options.holdout with data.val_split=holdout).")
        problems = [p for e in (tests or {}).values() for p in e["problems"]]
        if problems:
            text.append("\nNot scored:\n\n" + "".join(f"- {p}\n" for p in problems))
    else:
        text.append("Not scored on a test split (run without --no-test to score the representatives).")
    text += ["\n## Pareto fronts over validation (score, EPG, IoU)\n",
             markdown_table(front_rows, ["group", "setting", "epoch", "step", "seeds", "score", "epg", "iou",
                                         "representative"]),
             "\n![Pareto plot](pareto.png)\n"]
    if missing:
        text.append("\n## Runs without a summary\n\n" + "".join(f"- {name}\n" for name in missing))
    write_text_atomic(out / "pareto.md", "\n".join(text))
    plot_pareto(out / "pareto.png", points, [("epg", "score"), ("iou", "score")], title=title)
    return {"markdown": out / "pareto.md", "csv": out / "pareto.csv", "plot": out / "pareto.png"}


def report_runs(runs: Sequence[Run], out: str | Path, title: str, test_split: str | None = None,
           test: bool = True) -> tuple[dict[str, Path] | None, int, list[str]]:
    """Collect, aggregate over seeds, mark fronts and representatives on validation, score each representative on
    the test split (unless ``test`` is off) and write the report; returns its paths (``None`` without any
    validation yet), the number of aggregated points and the runs without a summary."""
    from ..classification import score_checkpoint

    points, missing = collect(runs)
    if not points:
        return None, 0, missing
    marked = mark_fronts(aggregate(points))
    tests = score_representatives(marked, runs, test_split,
                                  lambda run, artefact, split: score_checkpoint(run.config, artefact, split)) \
        if test else None
    return write_report(marked, missing, out, title, tests), len(marked), missing


def execute(runs: Sequence[Run], launcher: Sequence[str]) -> list[str]:
    """Run ``runs`` one after another through the grid runner (:func:`~rightreasons.engine.grid.run_grid`: finished
    ones are kept, interrupted ones resume), each as a command under ``launcher``; the names of failed runs."""
    def launch(run: GridRun, resume: bool) -> bool:
        argv = run.argv(launcher, resume)  # type: ignore[attr-defined]
        logger.info("%s: %s", run.name, shlex.join(argv))
        return subprocess.run(argv, check=False).returncode == 0

    outcomes = run_grid(runs, launch)
    return [name for name, outcome in outcomes.items() if outcome.status == "failed"]
