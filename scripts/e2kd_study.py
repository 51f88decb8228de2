"""Two e²KD studies on the synthetic benchmarks, each: train a teacher, distil it into a student of
half the width with KD, e²KD and e²KD from frozen explanations for several seeds, score the students on the test split.

    python scripts/e2kd_study.py limited-data --out runs/e2kd-limited          # a few minutes on 2 CPU cores
    python scripts/e2kd_study.py unbiased-teacher --out runs/e2kd-unbiased
    python scripts/e2kd_study.py limited-data --out /tmp/s --quick             # a smoke run, not a measurement
    python scripts/e2kd_study.py limited-data --out runs/e2kd-formats --cache-formats   # float16 vs compact cache

* ``limited-data`` (thesis §8.2.1): ``synthetic-multilabel`` with one large object per image (``max_objects: 1``,
  ``difficulty: 0``) — six shape classes on context backgrounds that co-occur with three of them — i.e. a
  single-label multi-class task. The teacher learns from the full training split, the students from ``--shots`` images per class (the same seeded shots for every
  mode and seed, as in the paper). Question: does e²KD beat KD in accuracy and agreement with 50 shots per class?
* ``unbiased-teacher``: ``synthetic-birds``; the teacher learns from data whose background is independent of the class
  (correlation 0.5), so it classifies by the shape — right for the right reasons by construction — and the students
  from the biased split (background = class, as in ``make demo``). Question: do e²KD students follow the teacher on
  the out-of-distribution groups (G2, G3) more often than KD students, who can copy its training labels from the
  background?

Teacher: B-cos ResNet-18 of width 16, 10 epochs; students: width 8, Adam lr 1e-3, τ = 1, λ = ``--weight``. Writes
``OUT/results.json`` and ``OUT/report.md`` (mean ± std over seeds, in %). ``--cache-formats`` trains frozen e²KD
students only, from a ``float16`` and from a ``compact`` cache of the same teacher (:mod:`rightreasons.distill.formats`),
instead of the three modes: does the small format train the same students?
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rightreasons.data import load_dataset, transforms_for
from rightreasons.distill import FidelityEvaluator
from rightreasons.metrics.evaluation import ClassificationEvaluator, evaluate
from rightreasons.classification import TrainingRun, run_training
from rightreasons.distill import MODE_LABELS, MODES, DistillationRun, run_distillation
from rightreasons.fileio import write_text_atomic
from rightreasons.models import load_model
from rightreasons.reporting import cell, markdown_table, summarize

LABELS = {"accuracy": "accuracy", "ood_accuracy": "OOD accuracy", "agreement": "agreement",
          "ood_agreement": "OOD agreement", "explanation_similarity": "expl. similarity"}


@dataclass(frozen=True)
class Study:
    """A teacher's and its students' data (``load_dataset`` options, random-crop scale), the students' shots and
    epochs, the metrics."""

    data: str
    teacher_options: dict[str, Any]
    student_options: dict[str, Any]
    shots: int | None
    student_epochs: int
    metrics: tuple[str, ...]
    question: str
    crop_scale: tuple[float, float] = (0.5, 1.0)


STUDIES = {
    # large objects (difficulty 0) and no random crops, which would often cut the one object out of its quadrant
    "limited-data": Study("synthetic-multilabel", {"max_objects": 1, "difficulty": 0.0, "seed": 0},
                          {"max_objects": 1, "difficulty": 0.0, "seed": 0}, 50, 20,
                          ("accuracy", "agreement", "explanation_similarity"),
                          "e²KD beats KD in accuracy and in agreement with the teacher", (1.0, 1.0)),
    "unbiased-teacher": Study("synthetic-birds", {"correlation": 0.5, "seed": 0}, {"correlation": 1.0, "seed": 0},
                              None, 5, ("accuracy", "ood_accuracy", "agreement", "ood_agreement",
                                        "explanation_similarity"),
                              "e²KD students agree with the teacher on G2/G3 at least 5 p.p. more often than KD"),
}


def options(base: dict[str, Any], size: int, n: int | None) -> dict[str, Any]:
    return {**base, "size": size, **({"n": n} if n else {})}


def train_teacher(out: Path, study: Study, args: argparse.Namespace) -> Path:
    """The teacher (the grid runner keeps a finished one of the same config in ``out/teacher``)."""
    return Path(run_training(TrainingRun(
        output_dir=str(out / "teacher"), model="bcos_resnet18", model_kwargs={"inplanes": 16}, data=study.data,
        data_options=options(study.teacher_options, args.size, args.train_images), image_size=args.size,
        batch_size=args.batch_size, crop_scale=list(study.crop_scale), epochs=args.teacher_epochs,
        lr=1e-3))["model_file"])


def score(student: torch.nn.Module, teacher: torch.nn.Module, test: Any) -> dict[str, float]:
    """Test accuracy, agreement (also on the OOD groups of bird data) and explanation similarity of a student."""
    fidelity = FidelityEvaluator(teacher, method="bcos_weights", layer="input", group_names=test.group_names)
    results = evaluate(student, test, [fidelity, ClassificationEvaluator.for_dataset(test)], batch_size=128,
                       device="cpu")
    return {key: float(value) for key, value in results.items() if key in LABELS}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", choices=list(STUDIES))
    parser.add_argument("--out", type=Path, required=True, help="output folder (runs, results.json, report.md)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--shots", type=int, help="training images per class of the students (limited-data: 50)")
    parser.add_argument("--epochs", type=int, help="training epochs of every student (default: the study's)")
    parser.add_argument("--weight", type=float, default=5.0, help="λ of the e²KD explanation term")
    parser.add_argument("--cache-formats", action="store_true",
                        help="frozen e²KD from a float16 and from a compact cache, instead of KD / e²KD / frozen e²KD")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, not a measurement")
    args = parser.parse_args(argv)
    study = STUDIES[args.study]
    args.shots = args.shots if args.shots is not None else study.shots
    args.epochs = args.epochs or study.student_epochs
    args.size, args.train_images, args.test_images, args.teacher_epochs, args.batch_size = 64, None, None, 10, 64
    if args.quick:
        args.seeds, args.epochs, args.size = 1, 2, 32
        args.shots = 2 if args.shots else None
        args.train_images, args.test_images, args.teacher_epochs, args.batch_size = 48, 24, 1, 8
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    study, out = STUDIES[args.study], args.out
    teacher = train_teacher(out, study, args)
    teacher_model = load_model(teacher)
    test = load_dataset(study.data, None, "test", **options(study.student_options, args.size, args.test_images),
                        transform=transforms_for(teacher_model, args.size, crop_fraction=1.0))
    # (key, mode, cache format, cache folder, label) of the students compared
    variants = ([(f"frozen_{f}", "e2kd_frozen", f, out / f"teacher-cache-{f}", f"frozen e²KD, {f} cache")
                 for f in ("float16", "compact")] if args.cache_formats else
                [(mode, mode, "float16", out / "teacher-cache", MODE_LABELS[mode]) for mode in MODES])
    runs: list[dict[str, dict[str, float]]] = []
    for seed in range(args.seeds):
        runs.append({})
        for key, mode, cache_format, cache_dir, _ in variants:
            folder = out / f"seed-{seed}" / key
            result = run_distillation(DistillationRun(
                teacher=str(teacher), mode=mode, output_dir=str(folder), student="bcos_resnet18",
                student_kwargs={"inplanes": 8}, data=study.data,
                data_options=options(study.student_options, args.size, args.train_images), image_size=args.size,
                batch_size=args.batch_size // (2 if args.shots else 1), epochs=args.epochs,
                explanation_weight=args.weight, seed=seed, cache_dir=str(cache_dir), cache_format=cache_format,
                test_split=None,
                shots=args.shots, localization=False, crop_scale=list(study.crop_scale)))
            runs[seed][key] = score(load_model(result["model_file"]), teacher_model, test)
            print(f"seed {seed} {key}: {runs[seed][key]}", file=sys.stderr, flush=True)
    keys = [key for key, *_ in variants]
    summary = summarize(runs, keys, study.metrics)
    teacher_metrics = score(teacher_model, teacher_model, test)
    results = {"study": args.study, "shots": args.shots, "epochs": args.epochs, "weight": args.weight,
               "seeds": args.seeds, "teacher": teacher_metrics,
               "runs": {f"seed-{k}": run for k, run in enumerate(runs)}, "summary": summary}
    write_text_atomic(out / "results.json", json.dumps(results, indent=2) + "\n")
    question = ("students from the compact cache match those from the float16 cache within one std"
                if args.cache_formats else study.question)
    rows = [{"mode": label, **{k: cell(summary[key][k]) for k in study.metrics}} for key, *_, label in variants]
    shots = f"{args.shots} shots per class" if args.shots else "the full biased training split"
    write_text_atomic(out / "report.md",
        f"# e²KD study `{args.study}` ({study.data})\n\nQuestion: {question}. Teacher test accuracy "
        f"{100 * teacher_metrics['accuracy']:.1f} %; students: {args.epochs} epochs on {shots}, λ = {args.weight:g}; "
        f"mean ± std over {args.seeds} seed(s), test split, % (explanation similarity: mean cosine × 100).\n\n"
        + markdown_table(rows, ["mode", *study.metrics], ["student", *(LABELS[k] for k in study.metrics)]))
    print(out / "report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
