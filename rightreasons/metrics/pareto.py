"""Model selection over several objectives (thesis §7.2, app. D): the Pareto front of checkpoint evaluations over
(F1, EPG, IoU), all maximised, and the "representative" model = the highest EPG with at most a 5 p.p. F1 drop.

An evaluation is a mapping with a unique ``"id"`` (any JSON-friendly value, e.g. ``"lambda=1e-3/epoch=7"``) and one
finite number per objective key (plain floats or 0-d tensors). Point ``a`` dominates ``b`` when ``a`` is at least as
good in every objective and strictly better in one; the front is the set of points no other point dominates (equal
points do not dominate each other, so duplicates all stay on the front).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_OBJECTIVES", "ParetoTracker", "dominates", "pareto_front", "representative"]

#: Objective keys maximised by default.
DEFAULT_OBJECTIVES: tuple[str, ...] = ("f1", "epg", "iou")


def _clean(evaluation: Mapping[str, Any], objectives: Sequence[str], id_key: str) -> dict[str, Any]:
    """A plain-dict copy with every objective as a finite float; ``ValueError`` naming the id and key otherwise."""
    if not isinstance(evaluation, Mapping):
        raise TypeError(f"an evaluation must be a mapping with {id_key!r} and {list(objectives)}, "
                        f"got {type(evaluation).__name__}")
    if id_key not in evaluation:
        raise ValueError(f"evaluation {dict(evaluation)!r} has no {id_key!r} key")
    out = dict(evaluation)
    for key in objectives:
        if key not in evaluation:
            raise ValueError(f"evaluation {evaluation[id_key]!r} has no objective {key!r} "
                             f"(keys: {sorted(map(str, evaluation))})")
        try:
            value = float(evaluation[key])
        except (TypeError, ValueError) as err:
            raise ValueError(f"evaluation {evaluation[id_key]!r}: objective {key!r} must be a number, "
                             f"got {evaluation[key]!r}") from err
        if not math.isfinite(value):
            raise ValueError(f"evaluation {evaluation[id_key]!r}: objective {key!r} must be finite, got {value}")
        out[key] = value
    return out


def dominates(a: Mapping[str, Any], b: Mapping[str, Any], objectives: Sequence[str] = DEFAULT_OBJECTIVES) -> bool:
    """True when ``a`` is at least as good as ``b`` in every objective and strictly better in at least one."""
    return (all(a[k] >= b[k] for k in objectives)) and any(a[k] > b[k] for k in objectives)


def _front(points: list[dict[str, Any]], objectives: Sequence[str]) -> list[dict[str, Any]]:
    return [p for p in points if not any(dominates(q, p, objectives) for q in points)]


def _check_unique(points: Iterable[Mapping[str, Any]], id_key: str) -> None:
    seen = set()
    for p in points:
        if p[id_key] in seen:
            raise ValueError(f"duplicate evaluation id {p[id_key]!r}: every checkpoint needs its own {id_key!r}")
        seen.add(p[id_key])


def pareto_front(evaluations: Iterable[Mapping[str, Any]], objectives: Sequence[str] = DEFAULT_OBJECTIVES,
                 id_key: str = "id") -> list[dict[str, Any]]:
    """The non-dominated evaluations (all objectives maximised), in input order, as plain dicts."""
    points = [_clean(e, objectives, id_key) for e in evaluations]
    _check_unique(points, id_key)
    return _front(points, objectives)


def representative(evaluations: Iterable[Mapping[str, Any]], max_f1_drop: float = 0.05, f1_key: str = "f1",
                   epg_key: str = "epg", objectives: Sequence[str] = DEFAULT_OBJECTIVES,
                   id_key: str = "id") -> dict[str, Any]:
    """The representative model: the highest ``epg_key`` among evaluations whose ``f1_key`` is at most
    ``max_f1_drop`` below the best one (5 p.p. = 0.05 for scores in [0, 1]; pass 5.0 for percentages).

    Ties in EPG go to the higher F1, then to the better remaining objectives in order, so the pick is always on the
    Pareto front. Raises ``ValueError`` for no evaluations.
    """
    keys = list(dict.fromkeys([epg_key, f1_key, *objectives]))
    front = pareto_front(evaluations, keys, id_key)
    if not front:
        raise ValueError("representative: no evaluations given")
    best_f1 = max(p[f1_key] for p in front)
    eligible = [p for p in front if p[f1_key] >= best_f1 - max_f1_drop]
    return max(eligible, key=lambda p: tuple(p[k] for k in keys))


class ParetoTracker:
    """Incrementally maintained Pareto front, e.g. of the checkpoints of one training run.

    ``update(evaluation)`` adds one evaluation and returns whether it is on the front (points it dominates are
    dropped; keep the checkpoint files of :attr:`front_ids` only). Only the front is stored: the best F1 and the
    representative pick of all evaluations ever seen both lie on it. ``state_dict()`` / ``load_state_dict()`` give a
    plain dict (for resuming training; also usable with ``accelerate``'s ``register_for_checkpointing``).
    """

    def __init__(self, objectives: Sequence[str] = DEFAULT_OBJECTIVES, id_key: str = "id") -> None:
        if not objectives:
            raise ValueError("ParetoTracker: objectives must name at least one key")
        self.objectives = tuple(objectives)
        self.id_key = id_key
        self._front: list[dict[str, Any]] = []
        self._ids: dict[Any, None] = {}  # insertion-ordered set

    def update(self, evaluation: Mapping[str, Any]) -> bool:
        """Add an evaluation; True when it is on the front afterwards. Its id must not have been given before."""
        point = _clean(evaluation, self.objectives, self.id_key)
        if point[self.id_key] in self._ids:
            raise ValueError(f"ParetoTracker.update: evaluation id {point[self.id_key]!r} was already added")
        self._ids[point[self.id_key]] = None
        if any(dominates(q, point, self.objectives) for q in self._front):
            return False
        self._front = [q for q in self._front if not dominates(point, q, self.objectives)] + [point]
        return True

    @property
    def front(self) -> list[dict[str, Any]]:
        """The current non-dominated evaluations, oldest first (copies)."""
        return [dict(p) for p in self._front]

    @property
    def front_ids(self) -> list[Any]:
        """Ids of the current front, oldest first."""
        return [p[self.id_key] for p in self._front]

    def representative(self, max_f1_drop: float = 0.05, f1_key: str = "f1", epg_key: str = "epg") -> dict[str, Any]:
        """:func:`representative` of everything seen so far."""
        return representative(self._front, max_f1_drop, f1_key, epg_key, self.objectives, self.id_key)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: objectives, id key, the front and all ids seen."""
        return {"objectives": list(self.objectives), "id_key": self.id_key, "front": self.front,
                "seen_ids": list(self._ids)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`; the stored objectives must match this tracker's."""
        missing = [k for k in ("objectives", "id_key", "front", "seen_ids") if k not in state]
        if missing:
            raise ValueError(f"ParetoTracker.load_state_dict: state lacks keys {missing}")
        if tuple(state["objectives"]) != self.objectives or state["id_key"] != self.id_key:
            raise ValueError(f"ParetoTracker.load_state_dict: state tracks objectives {list(state['objectives'])} "
                             f"with id key {state['id_key']!r}, this tracker {list(self.objectives)} with "
                             f"{self.id_key!r}")
        front = [_clean(p, self.objectives, self.id_key) for p in state["front"]]
        _check_unique(front, self.id_key)
        if len(_front(front, self.objectives)) != len(front):
            raise ValueError("ParetoTracker.load_state_dict: the stored front contains dominated points")
        self._front = front
        self._ids = dict.fromkeys([*state["seen_ids"], *(p[self.id_key] for p in front)])

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> ParetoTracker:
        """A new tracker restored from :meth:`state_dict`."""
        tracker = cls(state.get("objectives", DEFAULT_OBJECTIVES), state.get("id_key", "id"))
        tracker.load_state_dict(state)
        return tracker
