"""One ``rightreasons guide`` run that chooses its own settings on validation: :func:`run_selection`, for a config
with a ``selection`` grid (:class:`~rightreasons.guidance.config.SelectionConfig`, e.g.
``selection: {grid: {guidance.weight: [0, 5, 25]}, seeds: 1}`` or ``--grid guidance.weight=0,5,25``).

Every candidate (:meth:`~rightreasons.guidance.config.GuideConfig.candidates`) trains once per seed into
``output_dir/candidates/<label>[-seed<k>]`` on the grid runner (:func:`~rightreasons.engine.grid.run_grid`: finished candidates are kept, an interrupted one
resumes). Each exports its best checkpoint by ``eval.select`` and its score there is the candidate's score for that
seed. When the run fine-tunes ``model.checkpoint`` and ``selection.start`` holds, the starting model is a candidate
too: validated as every training validates (the task's own validation split, transforms and evaluators) and written
as ``candidates/baseline/model.safetensors`` with its ``validation.json``. The rule of the studies then chooses
(:func:`~rightreasons.engine.selection.choose`: the best mean over the seeds, the first in grid order on a tie, the
starting model first). ``output_dir`` ends up as a plain run's: ``model.safetensors`` (the chosen candidate's first
seed, byte for byte), ``summary.json`` (that run's summary with this run's config, ``selection``: the chosen label and
values and the validation curve, and ``test``: the chosen model scored once on the test split) and ``selection.md``
(the report), so ``evaluate``, ``explain`` and ``export`` work on it unchanged.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState

from ..classification import score_checkpoint
from ..config import from_dict, to_dict
from ..data import default_test_split
from ..engine.grid import GridRun, read_summary, run_grid
from ..engine.selection import START, Selection, choose, exported
from ..engine.task import task_for_config
from ..engine.trainer import MODEL_FILE, SUMMARY, Trainer, config_differences
from ..errors import TrainingError
from ..fileio import (DirectoryLock, atomic_write, read_json_object, remove_tree, write_json_atomic,
                      write_text_atomic)
from .config import GuideConfig

__all__ = ["CANDIDATES", "REPORT", "VALIDATION", "candidate_runs", "report_markdown", "run_selection", "start_config",
           "validate_start"]

logger = logging.getLogger(__name__)

CANDIDATES = "candidates"
"""The folder of ``output_dir`` that holds every candidate's run."""
REPORT = "selection.md"
"""The report of a selecting run, beside its ``summary.json``."""
VALIDATION = "validation.json"
"""The starting model's validation results, in ``candidates/baseline`` beside its model file."""


def _with(config: GuideConfig, **changes: Any) -> GuideConfig:
    """``config`` with top-level ``changes`` (``output_dir``, ``seed``), checked as a file would be."""
    return from_dict(type(config), {**to_dict(config), **changes})


def candidate_runs(config: GuideConfig) -> list[tuple[str, list[GridRun]]]:
    """Per candidate label, in grid order, its runs: one per seed (``config.seed + k``), each a plain guidance run
    into ``output_dir/candidates/<label>`` (``-seed<k>`` appended from the second seed on)."""
    root = Path(config.output_dir) / CANDIDATES
    out = []
    for label, changes, candidate in config.candidates():
        out.append((label, [GridRun(f"{label} seed {config.seed + k}",
                                    _with(candidate, output_dir=str(root / (label if k == 0 else f"{label}-seed{k}")),
                                          seed=config.seed + k), changes)
                            for k in range(config.selection.seeds)]))
    return out


def start_config(config: GuideConfig) -> GuideConfig | None:
    """The plain config that validates the model ``config`` starts from, into ``output_dir/candidates/baseline``;
    ``None`` when the run starts from no model file or ``selection.start`` is off."""
    if not config.selection.start or config.model.checkpoint is None:
        return None
    plain = config.candidates()[0][2]  # validation is the same for every candidate (the grid cannot vary eval)
    return _with(plain, output_dir=str(Path(config.output_dir) / CANDIDATES / START))


def validate_start(start: GuideConfig) -> float:
    """The validation ``eval.select`` score of the model ``start`` begins with (``model.checkpoint``), computed as
    every training validates (:meth:`~rightreasons.engine.trainer.Trainer.evaluate`: the task's validation split,
    transforms and evaluators), kept in ``start.output_dir`` with that model as a run's model file (read back when
    there)."""
    folder = Path(start.output_dir)
    result, model = folder / VALIDATION, folder / MODEL_FILE
    if result.is_file() and model.is_file():
        return float(read_json_object(result, "validation of the starting model", TrainingError)["score"])
    task = task_for_config(start)(start)
    trainer = Trainer(task)
    select = start.eval.select
    try:
        results = trainer.evaluate()
        if not isinstance(results.get(select), (int, float)):
            raise TrainingError(f"eval.select={select!r} is not a validation metric of this run; it reports "
                                f"{sorted(k for k, v in results.items() if isinstance(v, (int, float)))}")
        if trainer.accelerator.is_main_process:
            atomic_write(model, lambda tmp: task.save_model(trainer.bare_model, tmp,
                                                            {"config": json.dumps(to_dict(start))}))
            write_json_atomic(result, {"metric": select, "score": results[select], "results": results,
                                       "checkpoint": start.model.checkpoint})
        trainer.accelerator.wait_for_everyone()
    finally:
        trainer.lock.release()
    logger.info("the starting model %s: validation %s %.4f", start.model.checkpoint, select, results[select])
    return float(results[select])


def _previous(config: GuideConfig, resume: bool, overwrite: bool) -> dict[str, Any] | None:
    """As a plain run treats its directory: the finished selection of this config when resuming; a refusal naming
    what a fresh start would overwrite; with ``overwrite``, the previous summary, model and candidates removed."""
    out = Path(config.output_dir)
    if overwrite:
        if PartialState().is_main_process:
            for name in (SUMMARY, MODEL_FILE, REPORT):
                (out / name).unlink(missing_ok=True)
            if (out / CANDIDATES).is_dir():
                remove_tree(out / CANDIDATES, out)
        PartialState().wait_for_everyone()
        return None
    if (out / SUMMARY).is_file():
        summary = read_summary(out)
        if not resume:
            raise TrainingError(f"{out / SUMMARY} exists: {out} holds a finished run, which this run would "
                                "overwrite; pass --overwrite to replace it, --resume to keep it, or choose another "
                                "output_dir")
        differences = config_differences(summary.get("config") or {}, config)
        if differences:
            raise TrainingError(f"{out} holds a finished selection of another config ({'; '.join(differences[:3])}); "
                                "pass --overwrite to replace it, or choose another output_dir")
        return summary
    if not resume and (out / CANDIDATES).is_dir() and any((out / CANDIDATES).iterdir()):
        raise TrainingError(f"{out / CANDIDATES} already holds candidates of a selection; pass --resume to continue "
                            "it, --overwrite to start it again, or choose another output_dir")
    return None


def report_markdown(config: GuideConfig, selection: Selection, values: dict[str, Any],
                    test: dict[str, Any] | None) -> str:
    """``selection.md``: the grid, the validation curve
    (:meth:`~rightreasons.engine.selection.Selection.describe`), the chosen values and the chosen model's test
    scores."""
    grid = ", ".join(f"{k} ∈ {{{', '.join(str(v) for v in vs)}}}" for k, vs in config.selection.grid.items())
    chosen = "the starting model itself (no fine-tuning beat it on validation)" if selection.chosen == START else \
        ", ".join(f"{k} = {v}" for k, v in values.items())
    lines = [f"# Selection on validation: {config.output_dir}\n",
             f"Candidates: {grid}, {config.selection.seeds} seed(s) each"
             + (f", and the starting model ({config.model.checkpoint}, `{START}`)" if start_config(config) else "")
             + f". Each exports its best checkpoint by validation {selection.metric}; the best mean over the seeds "
             "is chosen (the first in grid order on a tie) and only it is scored on the test split.\n",
             f"Validation {selection.metric} (%, mean ± std over the seeds; bold: chosen): {selection.describe()}\n",
             f"Chosen: {chosen}.\n"]
    if test is not None:
        scores = ", ".join(f"{k} {v:.4f}" for k, v in test.items() if isinstance(v, float))
        lines.append(f"Test split ({test['split']}), scored once: {scores}\n")
    return "\n".join(lines)


def run_selection(config: GuideConfig, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
    """Train every candidate of ``config.selection`` (and validate the starting model), choose on validation, export
    the chosen model into ``output_dir`` and score it once on the test split (module docstring); returns the summary
    written there. ``resume`` continues an interrupted selection; ``overwrite`` starts it again."""
    out = Path(config.output_dir)
    finished = _previous(config, resume, overwrite)
    if finished is not None:
        logger.info("%s holds the finished selection of this config: nothing to do", out)
        return finished
    state = PartialState()
    lock = DirectoryLock(out, error=TrainingError)
    if state.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    try:
        candidates = candidate_runs(config)
        run_grid([r for _, runs in candidates for r in runs])
        scores = {label: [exported(read_summary(r.output_dir))["validation"] for r in runs]
                  for label, runs in candidates}
        start = start_config(config)
        start_score = None if start is None else [validate_start(start)] * config.selection.seeds
        selection = choose(scores, config.eval.select, "selection", start=start_score)
        if start is not None and start_score is not None and selection.chosen == START:
            chosen_config, values = start, {}
            chosen = {"task": "guide", "steps": 0, "epochs": 0, "history": [], "exported_step": 0,
                      "best": {"step": 0, "score": start_score[0], "metric": config.eval.select}}
        else:
            first = dict(candidates)[selection.chosen][0]
            chosen_config, values, chosen = first.config, dict(first.params), read_summary(first.output_dir)
        chosen_dir = Path(chosen_config.output_dir)
        summary: dict[str, Any] = {**chosen, "config": to_dict(config),
                                   "selection": {**selection.to_dict(), "values": values,
                                                 "seeds": config.selection.seeds,
                                                 "model_file": str(chosen_dir / MODEL_FILE)}}
        if state.is_main_process:
            split = default_test_split(config.data.name)
            test = None
            if split != config.data.val_split:  # a dataset without a test split: nothing is scored that chose
                device = "cuda" if torch.cuda.is_available() and not config.cpu else "cpu"
                test = score_checkpoint(chosen_config, chosen_dir / MODEL_FILE, split, device)
            summary["test"] = test
            write_text_atomic(out / REPORT, report_markdown(config, selection, values, test))
            atomic_write(out / MODEL_FILE, lambda tmp: tmp.write_bytes((chosen_dir / MODEL_FILE).read_bytes()))
            write_json_atomic(out / SUMMARY, summary)  # last: it marks the selection finished
            logger.info("chose %s on validation (%s); wrote %s and %s", selection.chosen, selection.describe(),
                        out / MODEL_FILE, out / SUMMARY)
        state.wait_for_everyone()
        return summary
    finally:
        lock.release()
