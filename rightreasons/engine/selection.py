"""Choosing hyper-parameters on validation: the one rule of the studies, the guidance recipe and the demo.

A method's *grid* (``{key: [values]}``) gives its candidate settings, every combination of the values
(:func:`candidates`). Every candidate trains once per seed; each run exports its best checkpoint on validation
(``eval.select``, ``eval.patience`` ending it early) and its score there is the candidate's score for that seed.
:func:`choose` averages the scores over the seeds and picks the best mean, the first in grid order on a tie: a grid
that holds the "do nothing" setting (λ = 0 for guidance) can only choose a setting at least as good on validation.
Only the chosen candidate's runs are then scored on the test split, once. :func:`choose_cells` applies the rule to
every cell of a study; :class:`Selection` keeps the validation curve that chose.

Candidates that fine-tune a model (guidance starts from a baseline) have one more: **no fine-tuning**, the starting
model itself, labelled :data:`START` and first in grid order. Its score per seed is computed before (the starting
model's exported checkpoint scored on the same validation split by the same metric), not trained: :func:`choose`
takes it as ``start``, :func:`with_start` adds it to a study's records. So validation can never hand back a
fine-tuning worse than the model it started from, and a tie keeps the starting model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from ..config import FieldError, construct, expect
from ..reporting import statistic

__all__ = ["START", "Selection", "candidates", "check_grid", "choose", "choose_cells", "combinations",
           "curves_markdown", "exported", "with_start"]

T = TypeVar("T")
R = TypeVar("R")

START = "baseline"
"""The label of the "no fine-tuning" candidate: the model the fine-tunings of a selection start from."""


@dataclass(frozen=True)
class Selection:
    """What :func:`choose` chose: the ``chosen`` setting's label and the validation ``curve`` that chose it, per
    candidate in grid order ``{"setting", "mean", "std", "values"}`` (``std`` ``None`` for one seed)."""

    metric: str
    chosen: str
    curve: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "chosen": self.chosen, "curve": [dict(point) for point in self.curve]}

    def describe(self) -> str:
        """The curve in one line, in %: ``setting: mean ± std``, the chosen setting in bold."""
        def point(p: dict[str, Any]) -> str:
            text = f"{p['setting'] or 'as set'}: {100 * p['mean']:.1f}" + (
                "" if p["std"] is None else f" ± {100 * p['std']:.1f}")
            return f"**{text}**" if p["setting"] == self.chosen else text
        return ", ".join(point(p) for p in self.curve)


def check_grid(grid: Mapping[str, Mapping[str, Sequence[Any]]], methods: Sequence[Any]) -> None:
    """Refuse a study's ``grid`` (method name → key → values) that names no method of ``methods`` (dataclasses
    with a ``name``), has an empty or a repeated value list, or a value its method refuses; errors name
    ``grid.<name>.<key>`` and the value."""
    names = [m.name for m in methods]
    for name, axes in grid.items():
        expect(name in names, f"grid.{name}", name, f"the name of a method of the study ({', '.join(names)})")
        for key, values in axes.items():
            where = f"grid.{name}.{key}"
            expect(key != "name" and isinstance(values, list) and len(values) > 0, where, values,
                   "a non-empty list of values of one of the method's hyper-parameters")
            repeated = [v for i, v in enumerate(values) if v in values[:i]]
            expect(not repeated, where, values, f"distinct values (repeated: {repeated})")
    for method in methods:
        candidates(method, grid.get(method.name, {}), f"grid.{method.name}")


def candidates(method: T, axes: Mapping[str, Sequence[Any]], where: str) -> list[tuple[str, T]]:
    """``(label, setting)`` of every combination of ``axes`` applied to the dataclass ``method``, labelled by the
    values (``step_size0.1-adjustment1``); ``method`` itself, labelled ``""``, without axes. ``where`` names the grid
    in errors."""
    fields = asdict(method)  # type: ignore[call-overload]
    unknown = sorted(set(axes) - set(fields))
    if unknown:
        raise FieldError(where, f"{unknown} are not hyper-parameters of {fields.get('name')} (it has "
                                f"{', '.join(fields)})")
    return [(label, construct(type(method), **{**fields, **changes}, key=where))
            for label, changes in combinations(axes)]


def combinations(axes: Mapping[str, Sequence[Any]]) -> list[tuple[str, dict[str, Any]]]:
    """``(label, {key: value})`` of every combination of the values of ``axes`` (key → values), in grid order (the
    last key varies fastest), labelled by key and value (``step_size0.1-adjustment1``); one empty combination,
    labelled ``""``, without axes."""
    out = []
    for values in itertools.product(*axes.values()):
        changes = dict(zip(axes, values))
        out.append(("-".join(f"{k}{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else f"{k}{v}"
                             for k, v in changes.items()), changes))
    return out


def choose(scores: Mapping[str, Sequence[float]], metric: str, where: str = "selection",
           start: Sequence[float] | None = None) -> Selection:
    """The setting with the best mean validation ``metric`` over the seeds, the first in grid order (the order of
    ``scores``: label → one score per seed) on a tie. ``start``: the starting model's score per seed when the
    candidates fine-tune one, a candidate labelled :data:`START` before the others (chosen on a tie). Every candidate
    needs the same number of seeds (at least one) and finite scores; otherwise a ``ValueError`` naming ``where``, the
    setting and the value."""
    if start is not None:
        if START in scores:
            raise ValueError(f"{where}: a trained setting is labelled {START!r}, the label of the starting model")
        scores = {START: start, **scores}
    if not scores:
        raise ValueError(f"{where}: no candidate settings to choose from")
    counts = {label: len(values) for label, values in scores.items()}
    if min(counts.values()) < 1 or len(set(counts.values())) > 1:
        raise ValueError(f"{where}: every setting needs the same number (>= 1) of seeds' scores, got {counts}")
    for label, values in scores.items():
        bad = [v for v in values if not isinstance(v, (int, float)) or not math.isfinite(v)]
        if bad:
            raise ValueError(f"{where}: setting {label!r} has a non-finite validation {metric} {bad[0]!r}; a run "
                             "that diverged cannot be compared")
    curve = tuple({"setting": label, **statistic([float(v) for v in values])} for label, values in scores.items())
    best = max(curve, key=lambda p: p["mean"])  # the first of equal maxima
    return Selection(metric, best["setting"], curve)


def choose_cells(records: Sequence[Mapping[str, Any]], cell: Sequence[str],
                 metric: str) -> dict[tuple[Any, ...], Selection]:
    """:func:`choose` per cell of a study: ``records`` (one per trained run, with ``setting`` and ``validation``, in
    grid order) grouped by their ``cell`` fields."""
    by_cell: dict[tuple[Any, ...], dict[str, list[float]]] = {}
    for r in records:
        by_cell.setdefault(tuple(r[k] for k in cell), {}).setdefault(r["setting"], []).append(r["validation"])
    return {key: choose(scores, metric, ", ".join(f"{k}={v}" for k, v in zip(cell, key)))
            for key, scores in by_cell.items()}


def with_start(runs: Sequence[tuple[R, Mapping[str, Any]]], cell: Sequence[str],
               start_of: Callable[[Mapping[str, Any]], tuple[R, Mapping[str, Any]] | None]) -> list[tuple[R, dict[str,
                                                                                                              Any]]]:
    """A study's ``runs`` (``(run, record)`` in grid order, each record with ``setting``, ``seed`` and the
    ``cell`` fields) with the "no fine-tuning" candidate of every cell of fine-tunings: ``start_of(record)`` is the
    ``(run, record)`` a fine-tuning starts from (``None`` for a run that fine-tunes nothing); per cell and seed that
    run joins the cell once, its record relabelled with the cell's fields and setting :data:`START`, before the
    cell's first run of that seed, so that :func:`choose_cells` lists it first and the test split scores that run
    when it is chosen."""
    out: list[tuple[R, dict[str, Any]]] = []
    added: set[tuple[Any, ...]] = set()
    for run, record in runs:
        start = start_of(record)
        key = (*(record[k] for k in cell), record["seed"])
        if start is not None and key not in added:
            added.add(key)
            start_run, start_record = start
            out.append((start_run, {**start_record, **{k: record[k] for k in cell}, "setting": START}))
        out.append((run, dict(record)))
    return out


def curves_markdown(choices: Mapping[tuple[Any, ...], Selection], cell: Sequence[str],
                    title: str = "Chosen on validation", score: str | None = None) -> str:
    """A report section (``title``) with the validation curve of every cell that chose among several settings (empty
    without one): the cell's fields, then :meth:`Selection.describe`; ``score`` names what was compared (default:
    the runs' validation metric at the checkpoint each exported)."""
    lines = [f"- {', '.join(f'{k} {v}' for k, v in zip(cell, key) if v is not None)}: {choice.describe()}"
             for key, choice in choices.items() if len(choice.curve) > 1]
    if not lines:
        return ""
    metric = next(iter(choices.values())).metric
    score = score or f"validation {metric} (%, mean ± std over the seeds of the checkpoint each run exported)"
    return "\n".join([f"\n## {title}\n\nPer cell, every candidate setting's {score}; bold: the chosen one, the best "
                      "mean (the first in grid order on a tie). Only the chosen setting was scored on test.\n", *lines])


def exported(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What a finished run's ``summary.json`` says of its exported best checkpoint: its ``validation`` score (by
    ``eval.select``), the ``epoch`` it was taken at and whether early stopping ended the run (``stopped_early``)."""
    best = summary["best"]
    epoch = next(r.get("epoch") for r in summary["history"] if r["step"] == best["step"])
    return {"validation": best["score"], "epoch": epoch, "stopped_early": bool(summary.get("stopped_early"))}
