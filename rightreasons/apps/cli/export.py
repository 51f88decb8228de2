"""`rightreasons export`: write a training run's model as a Hub-style model directory.

    rightreasons export runs/voc2007/guided --out models/voc2007-guided

RUN_DIR is what training wrote (the run directory, its model file or a checkpoint directory); `--out` receives
`model.safetensors`, `config.json` (architecture, arguments, classes, logit bias, input, the run's task and config)
and a `README.md` model card with the Hub's metadata header and the run's numbers from its `summary.json`
(`rightreasons.models.hub.save_pretrained`) which shows the explanations of the first two test images of the run
(B-cos models whose test split can be read). `--out` may be new, empty or an earlier export, which is replaced;
anything else is refused. `--push-to-hub OWNER/NAME` then uploads it (`rightreasons.models.hub.push_to_hub`, needs
`huggingface_hub`). `evaluate`, `explain`, `guide`, `distill` and `cache` take the directory wherever a model is
expected.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import UsageError
from .arguments import examples

if TYPE_CHECKING:  # torch and the viewer are imported when the command runs, so that --help starts at once
    from ...viewer import ViewedRun

__all__ = ["EXAMPLE_IMAGES", "example_pictures", "register", "run"]

logger = logging.getLogger(__name__)

EXAMPLE_IMAGES = 2
"""Test images whose explanations the model card shows."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="write a run's model as a Hub-style model directory with a model card",
                              description="Write what a training run wrote as a model directory (model.safetensors, "
                                          "config.json, README.md model card) that from_pretrained and every "
                                          "command taking a model load.",
                              epilog=examples("rightreasons export runs/voc/guided --out models/voc-guided",
                                              "rightreasons export runs/voc/guided --out models/voc-guided "
                                              "--push-to-hub someone/voc-guided"))
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                   help="the run directory, its model.safetensors or a checkpoint directory (RUN/checkpoints/step-N)")
    p.add_argument("--out", type=Path, required=True,
                   help="the model directory to write (new, empty, or an earlier export, which is replaced)")
    p.add_argument("--push-to-hub", metavar="OWNER/NAME",
                   help="then upload the directory to this Hugging Face Hub repository (created when missing; needs "
                        "huggingface_hub and a login)")
    p.set_defaults(func=run)


def refuse_occupied(out: Path) -> None:
    """Refuse an ``--out`` that holds files but is not an earlier export (which would be mixed with the model's)."""
    from ...models.hub import is_model_directory

    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; name a directory for the model")
    if out.is_dir() and any(out.iterdir()) and not is_model_directory(out):
        raise UsageError(f"--out {out} is a non-empty directory that is not an earlier export (no config.json of "
                         "rightreasons); choose a new or empty directory")


def example_pictures(run: ViewedRun, folder: Path) -> list[Path]:
    """Explanation figures of the first :data:`EXAMPLE_IMAGES` images of the run's test split, as the viewer reads
    them, into ``folder`` (:func:`~rightreasons.classification.hooks.explanation_figures`); none, with a warning that
    says why, for a model that is not B-cos or a test split that cannot be read."""
    from ...classification import resolve_classification_loss
    from ...classification.hooks import explanation_figures
    from ...data import collate, default_test_split
    from ...errors import DataError
    from ...metrics.evaluation import is_multilabel
    from ...models import capabilities
    from ...viewer.records import viewed_samples

    caps, data = capabilities(run.model), run.config.data
    if not caps.bcos:
        logger.warning("the model is not a B-cos network: the model card shows no explanation figures")
        return []
    split = default_test_split(data.name)
    try:
        samples, dataset = viewed_samples(run, split, EXAMPLE_IMAGES)
    except (DataError, UsageError, OSError) as e:
        logger.warning("the model card shows no explanation figures: split %r of %s cannot be read (%s)", split,
                       data.name, e)
        return []
    batch = collate(samples)
    link = resolve_classification_loss(run.config.loss.classification, True, is_multilabel(dataset))
    return explanation_figures(run.model, batch["image"], batch, folder, link,
                               getattr(dataset, "classes", caps.classes))


def run(args: argparse.Namespace) -> int:
    from ...engine.artifacts import locate_artifact, refuse_run_file
    from ...engine.trainer import SUMMARY
    from ...fileio import read_json_object, writable_directory
    from ...models.hub import check_repo_id, push_to_hub, save_pretrained
    from ...viewer import ViewedRun
    from ..tasks import load_trained

    if args.push_to_hub is not None:
        check_repo_id(args.push_to_hub, "--push-to-hub")
    refuse_occupied(args.out)
    refuse_run_file(args.out / "config.json", "--out")
    artifact = locate_artifact(args.run_dir, "RUN_DIR")
    summary = artifact.weights.parent / SUMMARY
    run_summary = read_json_object(summary, "training summary", UsageError) if summary.is_file() else None
    model, config = load_trained(artifact)
    writable_directory(args.out, "--out")
    with tempfile.TemporaryDirectory() as folder:
        pictures = [] if config is None else \
            example_pictures(ViewedRun("export", args.run_dir, model, config, run_summary or {}), Path(folder))
        print(save_pretrained(model, args.out, run=run_summary, pictures=pictures))
    if args.push_to_hub is not None:
        print(push_to_hub(args.out, args.push_to_hub))
    return 0
