"""``rightreasons train | guide | robust | evaluate``: fine-tune, box-guide, train group-robustly and evaluate
classifiers from YAML configs.

``train``, ``guide`` and ``robust`` need ``--config FILE`` (a run always says what it trains, on which data, into which
directory) plus ``key.path=value`` overrides (validated: unknown keys are errors); ``--print-config`` prints the
config they resolve to as YAML and exits (``evaluate`` too). Under ``accelerate launch`` or ``torchrun`` every process
runs the same command and training uses all of them.

``evaluate`` scores what ``train``/``guide`` wrote: the run directory, its model file or one of its checkpoint
directories. Without ``--config`` it reads the run's config from the run (``summary.json``, or a checkpoint's trainer
state) and refuses a bare model file; ``--split`` defaults to the dataset's test split, or ``val`` where there is none
(COCO 2014). The resolution is the one the model file records (``--size`` overrides it), else the config's. EPG and
IoU score against the config's ``eval.regions`` (boxes unless set, whatever the run was guided on); ``--regions masks``
(or ``points``, ``masks-else-boxes``, ``union``) overrides it.

    rightreasons train --config configs/guidance/voc2007_baseline.yaml
    rightreasons guide --config configs/guidance/voc2007.yaml guidance.weight=5e-3 --resume
    rightreasons evaluate --checkpoint runs/voc2007/guided/model.safetensors --out runs/voc2007/guided/test.json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import UsageError
from .arguments import (add_overwrite, add_print_config, add_regions, add_resume, examples, positive_int,
                        print_config, resume_and_overrides)

if TYPE_CHECKING:  # the commands import torch, accelerate and the tasks when they run, so that --help starts at once
    from ...engine import TrainConfig

logger = logging.getLogger(__name__)

EXAMPLES = {
    "train": ("rightreasons train --config configs/guidance/voc2007_baseline.yaml",
              "rightreasons train --config configs/guidance/voc2007_baseline.yaml optim.lr=1e-4 --print-config"),
    "guide": ("rightreasons guide --config configs/guidance/voc2007.yaml guidance.weight=5e-3 --resume",),
    "robust": ("rightreasons robust --config CONFIG.yaml robustness.method=groupdro robustness.adjustment=1",),
    "evaluate": ("rightreasons evaluate --checkpoint runs/voc2007/guided --out runs/voc2007/guided/test.json",
                 "rightreasons evaluate --checkpoint runs/voc2007/guided/checkpoints/step-000500 --split val"),
}
"""Command → the example commands at the end of its ``--help``."""


def _add_common(parser: argparse.ArgumentParser, config_required: bool) -> None:
    parser.add_argument("--config", type=Path, required=config_required,
                        help="YAML config (schema: rightreasons.classification.config, rightreasons.guidance.config)"
                        if config_required else
                        "YAML config (default: the config in the summary.json beside --checkpoint)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. optim.lr=1e-4")
    add_print_config(parser)


def register(subparsers: argparse._SubParsersAction) -> None:
    for name, help_text in (("train", "fine-tune a classifier (no localisation term)"),
                            ("guide", "fine-tune with a localisation loss on bounding boxes"),
                            ("robust", "train a classifier with a group-robustness objective (reweighting, "
                                       "subsampling, GroupDRO, JTT's up-weighting)")):
        p = subparsers.add_parser(name, help=help_text, epilog=examples(*EXAMPLES[name]))
        _add_common(p, config_required=True)
        if name == "guide":
            p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                           help="choose KEY among these values on validation (selection.grid; repeat for more keys): "
                                "every candidate trains into OUTPUT_DIR/candidates, the chosen model is exported to "
                                "OUTPUT_DIR, the starting model (model.checkpoint) a candidate too")
        add_resume(p)
        add_overwrite(p)
        p.set_defaults(func=run_train)
    p = subparsers.add_parser("evaluate", help="evaluate a trained model on a split and write all metrics as JSON",
                              epilog=examples(*EXAMPLES["evaluate"]))
    _add_common(p, config_required=False)
    p.add_argument("--checkpoint", type=Path, required=True,
                   help="what train/guide wrote: the run directory, its model.safetensors or a checkpoint directory "
                        "(RUN/checkpoints/step-N)")
    p.add_argument("--split", default=None,
                   help="dataset split to evaluate (default: test, or val for datasets without one, e.g. COCO)")
    p.add_argument("--size", type=positive_int, default=None,
                   help="image size to evaluate at (default: the input size the model file records, else the "
                        "config's data.image_size)")
    add_regions(p, None)
    p.add_argument("--out", type=Path, help="write the metrics here as JSON (default: print only)")
    p.set_defaults(func=run_evaluate)


def run_train(args: argparse.Namespace) -> int:
    from accelerate import PartialState

    from ...engine import run
    from ..tasks import load_task_config

    resume, overrides = resume_and_overrides(args)
    grid = getattr(args, "grid", [])
    config = load_task_config(args.command, args.config, overrides, _grid(grid) if grid else None)
    if args.print_config:
        return print_config(config)
    selection = getattr(config, "selection", None)
    if selection is not None and selection.grid:
        from ...guidance.choosing import run_selection

        if isinstance(resume, str):
            raise UsageError(f"--resume {resume}: a run that chooses among candidates resumes each of them itself; "
                             "pass --resume without a checkpoint")
        summary = run_selection(config, resume=bool(resume), overwrite=args.overwrite)
    else:
        summary = run(config, resume=resume, overwrite=args.overwrite)
    if PartialState().is_main_process:
        chosen = {"chosen": summary["selection"]["chosen"], "values": summary["selection"]["values"]} \
            if "selection" in summary else {}
        print(json.dumps({"best": summary["best"], "steps": summary["steps"], "output_dir": config.output_dir,
                          **chosen}))
    return 0


def _grid(items: list[str]) -> dict[str, list[object]]:
    """``--grid KEY=V1,V2,...`` options as ``selection.grid`` (each value parsed as a YAML scalar, as overrides are);
    a malformed one is a :class:`UsageError` naming it."""
    import yaml

    from ...config import read_yaml

    grid: dict[str, list[object]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip() or not raw.strip():
            raise UsageError(f"--grid {item!r} is not of the form KEY=V1,V2,... (e.g. guidance.weight=0,5,25)")
        if key.strip() in grid:
            raise UsageError(f"--grid {item!r}: {key.strip()} is given twice; list all its values in one --grid")
        try:
            grid[key.strip()] = [read_yaml(v) for v in raw.split(",")]
        except (ValueError, yaml.YAMLError) as e:
            raise UsageError(f"--grid {item!r}: a value is not a YAML scalar: {e}") from None
    return grid


def run_config(checkpoint: Path, overrides: list[str]) -> tuple[TrainConfig, Path]:
    """The config of the run that wrote ``checkpoint`` (a run directory, its model file or a checkpoint directory:
    :func:`~rightreasons.engine.artifacts.locate_artifact`) with ``overrides``, and the file it was read from;
    :class:`UsageError` for a model file without its run's summary."""
    from ...engine.artifacts import locate_artifact
    from ...engine.trainer import SUMMARY
    from ..tasks import trained_config

    artifact = locate_artifact(checkpoint, "--checkpoint")
    config = trained_config(artifact, overrides)
    if config is None:
        raise UsageError(f"no {SUMMARY} beside {checkpoint}, so the config it was trained with is unknown (a finished "
                         f"run writes {SUMMARY} next to its model.safetensors); pass --config FILE with that config")
    return config, artifact.config_source


def run_evaluate(args: argparse.Namespace) -> int:
    from ...classification import score_checkpoint
    from ...data import default_test_split
    from ...engine.artifacts import refuse_run_file
    from ...fileio import json_text, writable_file, write_text_atomic
    from ..tasks import load_task_config

    if args.out:
        refuse_run_file(args.out, "--out")
        writable_file(args.out, "--out")
    if args.config is not None:
        config, source = load_task_config(None, args.config, args.overrides), args.config
    else:
        config, source = run_config(args.checkpoint, list(args.overrides))
    if args.print_config:
        return print_config(config)
    split = args.split or default_test_split(config.data.name)
    logger.info("evaluating %s on split %r of %s (config: %s)", args.checkpoint, split, config.data.name, source)
    results = {"config": str(source), **score_checkpoint(config, args.checkpoint, split, image_size=args.size,
                                                                regions=args.regions)}
    text = json_text(results, str(args.out or "the results"))
    if args.out:
        write_text_atomic(args.out, text)
    print(text)
    return 0
