"""Helpers of the download checks of ``rightreasons prepare``: a problem report, the loaders' own checks of a split
(:func:`check_split`, the one dataset check shared with training) and checksums."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from ...fileio import file_digest
from ..base import AnnotatedDataset
from ..errors import BoxWarning, DataError
from ..verify import sample_problems, shared_ids

__all__ = ["Report", "check_disjoint", "check_split", "read_checksum_file", "verify_checksums"]


class Report:
    """Collects what is missing or wrong and prints it; ``exit_code`` is 1 when there was any problem."""

    def __init__(self, title: str, show: int = 20) -> None:
        self.title, self.show = title, show
        self.problems: list[str] = []
        self.notes: list[str] = []

    def problem(self, message: str, items: Sequence[str] = ()) -> None:
        """Record a problem; ``items`` (e.g. missing files) are listed, the first ``show`` of them."""
        lines = [message] + [f"    {item}" for item in items[:self.show]]
        if len(items) > self.show:
            lines.append(f"    ... and {len(items) - self.show} more")
        self.problems.append("\n".join(lines))

    def note(self, message: str) -> None:
        self.notes.append(message)

    def text(self) -> str:
        """The report as a command prints it: title, notes, problems and the verdict, one per line."""
        return "\n".join([f"== {self.title}", *(f"  {note}" for note in self.notes),
                          *(f"  MISSING/INVALID: {problem}" for problem in self.problems),
                          f"== {'OK' if not self.problems else f'{len(self.problems)} problem(s)'}"])

    @property
    def exit_code(self) -> int:
        return 1 if self.problems else 0


def check_split(report: Report, split: str, load: Callable[[], AnnotatedDataset], checked: set[str],
                workers: int) -> AnnotatedDataset | None:
    """Build the loader of ``split`` (``load()``: its annotation files, split list and ids checked) and load each of
    its samples not in ``checked`` (image ids already checked in another split; updated) as training does, with
    ``workers`` processes (:func:`~rightreasons.data.verify.sample_problems`). What they refuse goes to ``report``
    with the loader's own messages; boxes the loader repairs under its box policy are noted. Returns the dataset, or
    None when the loader refused the split."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BoxWarning)
        try:
            dataset = load()
        except DataError as e:
            report.problem(str(e))
            return None
    repaired = sum(issubclass(w.category, BoxWarning) for w in caught)
    if repaired:
        report.note(f"{split}: {repaired} annotation(s) hold boxes the loader repairs (clipped to the image or "
                    "dropped, by its box_policy, with a warning)")
    todo = [i for i, image_id in enumerate(dataset.ids) if image_id not in checked]
    checked.update(dataset.ids)
    problems = sample_problems(dataset, todo, workers)
    if problems:
        report.problem(f"{len(problems)} image(s) of split '{split}' refused by the loader", problems)
    return dataset


def check_disjoint(report: Report, splits: Sequence[AnnotatedDataset | None]) -> None:
    """Report every pair of ``splits`` (those meant to be disjoint: train, val, test; ``None``: a split the loader
    refused) that shares image ids (:func:`~rightreasons.data.verify.shared_ids`), as training refuses a training
    and validation split that do."""
    loaded = [split for split in splits if split is not None]
    for i, first in enumerate(loaded):
        for second in loaded[i + 1:]:
            problem = shared_ids(first, second)
            if problem is not None:
                report.problem(problem)


def verify_checksums(expected: dict[str, str], root: str | os.PathLike, report: Report) -> None:
    """Compare ``{relative path: md5}`` against the files under ``root``; problems go to ``report``."""
    root = Path(root)
    for name, md5 in expected.items():
        path = root / name
        if not path.is_file():
            report.problem(f"{path}: file to checksum not found")
            continue
        actual = file_digest(path, "md5")
        if actual != md5.lower():
            report.problem(f"{path}: md5 {actual}, expected {md5}")
        else:
            report.note(f"{path}: md5 OK")


def read_checksum_file(path: str | os.PathLike) -> dict[str, str]:
    """``md5sum``-style lines ``<md5>  <relative path>`` → ``{path: md5}``."""
    out = {}
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or len(parts[0]) != 32:
            raise ValueError(f"{path}: line {i}: expected '<md5>  <path>', got {line!r}")
        out[parts[1].strip().lstrip("*")] = parts[0]
    return out
