"""Choosing hyper-parameters on validation: the one rule of the studies, the guidance recipe and the demo.

A method's *grid* (``{key: [values]}``) gives its candidate settings, every combination of the values
(:func:`candidates`). Every candidate trains once per seed; each run exports its best checkpoint on validation
(``eval.select``, ``eval.patience`` ending it early) and its score there is the candidate's score for that seed.
:func:`choose` averages the scores over the seeds and picks the best mean, the first in grid order on a tie: a grid
that holds the "do nothing" setting (λ = 0 for guidance) can only choose a setting at least as good on validation.
Only the chosen candidate's runs are then scored on the test split, once. :func:`choose_cells` applies the rule to
every cell of a study; :class:`Selection` keeps the validation curve that chose.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from ..config import FieldError, construct, expect
from ..reporting import statistic

__all__ = ["Selection", "candidates", "check_grid", "choose", "choose_cells", "curves_markdown", "exported"]

T = TypeVar("T")


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
    out = []
    for values in itertools.product(*axes.values()):
        changes = dict(zip(axes, values))
        label = "-".join(f"{k}{v:g}" if isinstance(v, (int, float)) else f"{k}{v}" for k, v in changes.items())
        out.append((label, construct(type(method), **{**fields, **changes}, key=where)))
    return out


def choose(scores: Mapping[str, Sequence[float]], metric: str, where: str = "selection") -> Selection:
    """The setting with the best mean validation ``metric`` over the seeds, the first in grid order (the order of
    ``scores``: label → one score per seed) on a tie. Every candidate needs the same number of seeds (at least one)
    and finite scores; otherwise a ``ValueError`` naming ``where``, the setting and the value."""
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


def curves_markdown(choices: Mapping[tuple[Any, ...], Selection], cell: Sequence[str]) -> str:
    """A report section with the validation curve of every cell that chose among several settings (empty without
    one): the cell's fields, then :meth:`Selection.describe`."""
    lines = [f"- {', '.join(f'{k} {v}' for k, v in zip(cell, key) if v is not None)}: {choice.describe()}"
             for key, choice in choices.items() if len(choice.curve) > 1]
    if not lines:
        return ""
    metric = next(iter(choices.values())).metric
    return "\n".join([f"\n## Chosen on validation\n\nPer cell, every candidate setting's validation {metric} (%, "
                      "mean ± std over the seeds of the checkpoint each run exported); bold: the chosen one, the best "
                      "mean (the first in grid order on a tie). Only the chosen setting was scored on test.\n", *lines])


def exported(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What a finished run's ``summary.json`` says of its exported best checkpoint: its ``validation`` score (by
    ``eval.select``), the ``epoch`` it was taken at and whether early stopping ended the run (``stopped_early``)."""
    best = summary["best"]
    epoch = next(r.get("epoch") for r in summary["history"] if r["step"] == best["step"])
    return {"validation": best["score"], "epoch": epoch, "stopped_early": bool(summary.get("stopped_early"))}
