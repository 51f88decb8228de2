"""``rightreasons train | guide | evaluate``: fine-tune, box-guide and evaluate classifiers from YAML configs.

Each takes ``--config FILE`` plus ``key.path=value`` overrides (validated: unknown keys are errors). Under
``accelerate launch`` or ``torchrun`` every process runs the same command and training uses all of them.

    rightreasons train --config configs/guidance/waterbirds100.yaml output_dir=runs/base
    rightreasons guide --config configs/guidance/voc2007.yaml guidance.weight=5e-3 --resume
    rightreasons evaluate --config configs/guidance/voc2007.yaml --checkpoint runs/x/model.safetensors \
        --split test --out runs/x/test.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from accelerate import PartialState

from ..config import load_config
from ..engine import TrainConfig
from ..tasks import evaluate_checkpoint, run


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML config (schema: rightreasons.engine.schema)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. optim.lr=1e-4")


def register(subparsers: argparse._SubParsersAction) -> None:
    for name, help_text in (("train", "fine-tune a classifier (no localisation term)"),
                            ("guide", "fine-tune with a localisation loss on bounding boxes")):
        p = subparsers.add_parser(name, help=help_text)
        _add_common(p)
        p.add_argument("--resume", nargs="?", const=True, default=False, metavar="CHECKPOINT",
                       help="continue from the newest intact checkpoint of output_dir (or the one given); "
                        "starts from the beginning when there is none yet, so one command line serves the first "
                        "start and every requeue")
        p.set_defaults(func=run_train, guided=name == "guide")
    p = subparsers.add_parser("evaluate", help="evaluate a trained model on a split and write all metrics as JSON")
    _add_common(p)
    p.add_argument("--checkpoint", type=Path, required=True, help="a model.safetensors written by train/guide")
    p.add_argument("--split", default="test", help="dataset split to evaluate (default: test)")
    p.add_argument("--out", type=Path, help="write the metrics here as JSON (default: print only)")
    p.set_defaults(func=run_evaluate)


def run_train(args: argparse.Namespace) -> int:
    overrides = list(args.overrides) + (["guidance.enabled=true"] if args.guided else ["guidance.enabled=false"])
    config = load_config(TrainConfig, args.config, overrides)
    summary = run(config, resume=args.resume)
    if PartialState().is_main_process:
        print(json.dumps({"best": summary["best"], "steps": summary["steps"], "output_dir": config.output_dir}))
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    config = load_config(TrainConfig, args.config, args.overrides)
    results = evaluate_checkpoint(config, args.checkpoint, args.split)
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)
    return 0
