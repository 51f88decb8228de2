"""`rightreasons export`: write a training run's model as a Hub-style model directory.

    rightreasons export runs/voc2007/guided --out models/voc2007-guided

RUN_DIR is what training wrote (the run directory, its model file or a checkpoint directory); `--out` receives
`model.safetensors`, `config.json` (architecture, arguments, classes, logit bias, input, the run's task and config)
and a `README.md` model card with the Hub's metadata header and the run's numbers from its `summary.json`
(`rightreasons.models.hub.save_pretrained`). `--out` may be new, empty or an earlier export, which is replaced;
anything else is refused. `evaluate`, `explain`, `guide`, `distill` and `cache` take the directory wherever a model
is expected.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ...errors import UsageError

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="write a run's model as a Hub-style model directory with a model card",
                              description="Write what a training run wrote as a model directory (model.safetensors, "
                                          "config.json, README.md model card) that from_pretrained and every "
                                          "command taking a model load. Example: rightreasons export runs/voc/guided "
                                          "--out models/voc-guided")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                   help="the run directory, its model.safetensors or a checkpoint directory (RUN/checkpoints/step-N)")
    p.add_argument("--out", type=Path, required=True,
                   help="the model directory to write (new, empty, or an earlier export, which is replaced)")
    p.set_defaults(func=run)


def refuse_occupied(out: Path) -> None:
    """Refuse an ``--out`` that holds files but is not an earlier export (which would be mixed with the model's)."""
    from ...models.hub import is_model_directory

    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; name a directory for the model")
    if out.is_dir() and any(out.iterdir()) and not is_model_directory(out):
        raise UsageError(f"--out {out} is a non-empty directory that is not an earlier export (no config.json of "
                         "rightreasons); choose a new or empty directory")


def run(args: argparse.Namespace) -> int:
    from ...engine.artifacts import locate_artifact, refuse_run_file
    from ...engine.trainer import SUMMARY
    from ...fileio import read_json_object, writable_directory
    from ...models.hub import save_pretrained
    from ..tasks import load_trained

    refuse_occupied(args.out)
    refuse_run_file(args.out / "config.json", "--out")
    artifact = locate_artifact(args.run_dir, "RUN_DIR")
    summary = artifact.weights.parent / SUMMARY
    run_summary = read_json_object(summary, "training summary", UsageError) if summary.is_file() else None
    model, _ = load_trained(artifact)
    writable_directory(args.out, "--out")
    print(save_pretrained(model, args.out, run=run_summary))
    return 0
