"""A distillation in one call: :class:`DistillationRun` (a typed recipe, loadable from YAML) and
:func:`run_distillation`.

The recipe distils a teacher model file (e.g. the Energy-guided teacher of the demo) into a small student with plain KD,
live e²KD or e²KD from frozen explanations, with the B-cos training recipe (Adam, cosine schedule, AGC), and evaluates
the student on a test split. :meth:`DistillationRun.config` builds the :class:`~rightreasons.distill.DistillConfig` it
stands for, section by section. The demo's e²KD stage and the e²KD studies use it; from YAML::

    run = load_config(DistillationRun, "e2kd.yaml")      # keys: the fields of DistillationRun
    result = run_distillation(run)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..classification.config import EvalConfig, ModelConfig, OptimConfig
from ..config import construct
from ..engine.grid import GridRun, in_process, read_summary, run_grid
from ..classification.recipe import TrainingRun
from ..engine.config import CROP_SCALE, CheckpointConfig, DataConfig
from ..models.weights import RUN_MODEL_FILE
from .config import DistillConfig, DistillSection, EvalDataConfig, TeacherConfig
from .teacher import write_teacher_cache

__all__ = ["MODES", "MODE_LABELS", "DistillationRun", "distill_in_process", "run_distillation"]

MODES = ("kd", "e2kd", "e2kd_frozen")
"""The three ways of distilling: logits only, logits and live explanations, logits and cached explanations."""
MODE_LABELS = {"kd": "KD", "e2kd": "e²KD", "e2kd_frozen": "e²KD (frozen)"}
"""How tables and figures name the modes."""


@dataclass
class DistillationRun:
    """One distillation of a teacher model file into a student.

    Attributes:
        teacher: a ``model.safetensors`` written by rightreasons training.
        mode: ``kd`` (λ = 0), ``e2kd`` (live teacher explanations, λ = ``explanation_weight``, default 5 from the
            paper's B-cos Waterbirds grid {1, 5, 10}) or ``e2kd_frozen`` (explanations cached once in ``cache_dir``,
            default ``output_dir/../teacher-cache``, then reused: share one ``cache_dir`` across seeds and it is
            written once).
        cache_format: how that cache stores the explanations (``float16`` or ``compact``,
            :mod:`rightreasons.distill.formats`); give each format a ``cache_dir`` of its own.
        output_dir: the run's directory (checkpoints, ``metrics.jsonl``, ``model.safetensors``, ``summary.json``).
        student, student_kwargs: the student's registry name and constructor arguments.
        data, data_root, data_options: the distillation data (``data.options``, e.g. ``{"n": 500, "size": 64}`` for
            the synthetic sets); its validation split is used during training and ``test_split`` at the end.
        data_split_options: a split's own options over ``data_options`` (``data.split_options``), e.g. the test
            split the demo scores, so that ``evaluate`` scores the same images.
        image_size, batch_size, crop_scale, epochs, max_steps, lr: the schedule.
        temperature: τ of the KD term.
        seed: the run's seed (data order, augmentation, student initialisation).
        shots: limited data, this many training images per class (``None``: all).
        localization: score EPG/IoU of the student in validation.
        eval_data: validate on this dataset instead of the validation split of ``data``.
    """

    teacher: str
    mode: Literal[MODES]  # type: ignore[valid-type]
    output_dir: str
    student: str = "bcos_cifar10_resnet20"
    student_kwargs: dict[str, Any] = field(default_factory=dict)
    data: str = "synthetic-birds"
    data_root: str | None = None
    data_options: dict[str, Any] = field(default_factory=dict)
    data_split_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    image_size: int = TrainingRun.image_size
    batch_size: int = DataConfig.batch_size
    crop_scale: list[float] = field(default_factory=lambda: list(CROP_SCALE))
    epochs: int = TrainingRun.epochs
    max_steps: int | None = None
    lr: float = TrainingRun.lr
    temperature: float = DistillSection.temperature
    explanation_weight: float = 5.0
    seed: int = 0
    cache_dir: str | None = None
    cache_format: str = DistillSection.cache_format
    test_split: str | None = "test"
    shots: int | None = None
    localization: bool = True
    eval_data: EvalDataConfig | None = None
    cpu: bool = True

    @property
    def cache(self) -> Path | None:
        """Where the frozen run's teacher cache lives (``None`` for the live modes)."""
        if self.mode != "e2kd_frozen":
            return None
        return Path(self.cache_dir) if self.cache_dir is not None else Path(self.output_dir).parent / "teacher-cache"

    @property
    def model_file(self) -> Path:
        """Where the trained student is written."""
        return Path(self.output_dir) / RUN_MODEL_FILE

    def config(self) -> DistillConfig:
        """The full distillation config this recipe stands for."""
        return construct(lambda: DistillConfig(
            output_dir=str(self.output_dir), seed=self.seed, cpu=self.cpu, max_steps=self.max_steps,
            model=construct(ModelConfig, self.student, kwargs=dict(self.student_kwargs), key="model"),
            teacher=TeacherConfig(checkpoint=str(self.teacher)),
            data=construct(DataConfig, self.data, self.data_root, image_size=self.image_size,
                           batch_size=self.batch_size, crop_scale=list(self.crop_scale),
                           options=dict(self.data_options),
                           split_options={k: dict(v) for k, v in self.data_split_options.items()}, key="data"),
            optim=construct(OptimConfig, lr=self.lr, schedule="cosine", epochs=self.epochs, key="optim"),
            eval=construct(EvalConfig, every_epochs=self.epochs, num_images=0, localization=self.localization,
                           key="eval"),
            checkpoint=CheckpointConfig(keep_last=1),
            distill=construct(DistillSection, temperature=self.temperature,
                              explanation_weight=0.0 if self.mode == "kd" else self.explanation_weight,
                              frozen=None if self.cache is None else str(self.cache),
                              cache_format=self.cache_format, shots=self.shots,
                              eval_data=self.eval_data, test_split=self.test_split, key="distill")))


def run_distillation(recipe: DistillationRun) -> dict[str, Any]:
    """Write the teacher cache (frozen mode; reused when complete), distil on the grid runner (a finished run of the
    same config is kept, an interrupted one resumes), and return
    ``{"mode", "seed", "model_file", "cache_dir", "steps", "seconds", "val": last validation metrics, "test": test
    metrics}`` — the test metrics hold ``accuracy``, ``accuracy/<group>``, ``agreement``, ``agreement/<group>``,
    ``ood_accuracy``, ``ood_agreement``, ``id_accuracy``, ``id_agreement``, ``explanation_similarity``,
    ``teacher_accuracy`` and ``epg``/``iou`` of the student's explanations."""
    config = recipe.config()
    run_grid([GridRun(str(recipe.output_dir), config)], distill_in_process)
    summary = read_summary(config.output_dir)
    return {"mode": recipe.mode, "seed": recipe.seed, "model_file": str(recipe.model_file),
            "cache_dir": None if recipe.cache is None else str(recipe.cache), "steps": summary["steps"],
            "seconds": summary["seconds"], "val": summary["history"][-1] if summary["history"] else {},
            "test": summary.get("test", {})}


def distill_in_process(grid_run: GridRun, resume: bool) -> bool:
    """Train a distillation of the grid runner (:func:`~rightreasons.engine.grid.run_grid`) in this process: first the
    teacher cache a frozen run reads (``distill.frozen``; written once and reused when complete,
    :func:`~rightreasons.distill.teacher.write_teacher_cache`), then the training (as
    :func:`~rightreasons.engine.grid.in_process` does); an error propagates."""
    config = grid_run.config
    if config.distill.frozen is not None:  # type: ignore[attr-defined]
        write_teacher_cache(config, config.distill.frozen)  # type: ignore[attr-defined, arg-type]
    return in_process(grid_run, resume)
