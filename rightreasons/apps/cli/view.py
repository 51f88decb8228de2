"""`rightreasons view`: one static HTML page comparing training runs image by image.

    rightreasons view runs/waterbirds/baseline runs/waterbirds/guided --out compare.html

Each RUN_DIR is what training wrote (the run directory, its model file or a checkpoint directory); all must be
trained on one dataset. The page (one file, nothing fetched: it opens from the disk) shows the first `--images`
images of `--split` (default: the dataset's test split, else val) with their boxes, each run's explanation of the true
class beside it (the method and layer the run's config scores localisation with, B-cos explanations for B-cos models;
`--method` / `--layer` override), its prediction and the image's EPG (against the boxes; `--regions masks` and the
other choices of `eval.regions` score every run against those instead), the true labels and the group; it filters by
class, group and correctness, sorts by a run's EPG or by the difference between two runs, and lists each run's
metrics from its summary.json at the top (`rightreasons.viewer`). `--out` never replaces a run's own files.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import UsageError
from .arguments import add_regions, examples, positive_int, torch_device

if TYPE_CHECKING:  # torch and the viewer are imported when the command runs, so that --help starts at once
    from ...viewer import ViewedRun

__all__ = ["load_run", "register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("view", help="write one HTML page comparing runs' explanations image by image",
                              description="Write one self-contained HTML page (no server, nothing fetched) with the "
                                          "same test images for every run: boxes, each run's explanation, prediction "
                                          "and EPG, labels and groups; filters, sorting by EPG and each run's metrics.",
                              epilog=examples("rightreasons view runs/baseline runs/guided --out compare.html"))
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR",
                   help="a run directory, its model.safetensors or a checkpoint directory (RUN/checkpoints/step-N)")
    p.add_argument("--out", type=Path, required=True, help="the HTML file to write")
    p.add_argument("--images", type=positive_int, default=48, metavar="N",
                   help="how many images: the first N of the split (default: 48)")
    p.add_argument("--split", default=None,
                   help="dataset split to show (default: test, or val for datasets without one, e.g. COCO)")
    p.add_argument("--method", default=None,
                   help="explanation method: bcos, bcos_weights, ixg, gradcam or intgrad (default: the one each run's "
                        "config scores localisation with)")
    p.add_argument("--layer", default=None,
                   help="layer the method explains (default: the run config's, or the method's default layer "
                        "with --method)")
    add_regions(p, "boxes")
    p.add_argument("--device", type=torch_device, help="torch device (default: cuda when available, else cpu)")
    p.set_defaults(func=run)


def load_run(path: Path, label: str) -> ViewedRun:
    """The run that `path` names (:func:`~rightreasons.engine.artifacts.locate_artifact`) with its summary; a bare
    model file, which records no dataset, is refused."""
    from ...engine.artifacts import locate_artifact
    from ...engine.trainer import SUMMARY
    from ...fileio import read_json_object
    from ...viewer import ViewedRun
    from ..tasks import load_trained

    artifact = locate_artifact(path, "RUN_DIR")
    model, config = load_trained(artifact)
    if config is None:
        raise UsageError(f"RUN_DIR {path}: a model file without its run's {SUMMARY}, so the data it was trained on is "
                         "unknown; name the run directory or a model directory written by `rightreasons export`")
    summary = artifact.weights.parent / SUMMARY
    return ViewedRun(label, path, model, config,
                     read_json_object(summary, "training summary") if summary.is_file() else {})


def run(args: argparse.Namespace) -> int:
    import torch

    from ...data import default_test_split
    from ...engine.artifacts import refuse_run_file
    from ...explain import METHOD_NAMES
    from ...fileio import refuse_link, writable_file, write_text_atomic
    from ...viewer import collect_view, render_page, run_labels

    if args.method is not None and args.method not in METHOD_NAMES:
        raise UsageError(f"--method {args.method}: expected one of {', '.join(METHOD_NAMES)}")
    refuse_run_file(args.out, "--out")
    writable_file(args.out, "--out")
    refuse_link(args.out)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    runs = [load_run(path, label) for path, label in zip(args.run_dirs, run_labels(args.run_dirs))]
    split = args.split or default_test_split(runs[0].config.data.name)
    view = collect_view(runs, split, args.images, args.method, args.layer, device=device, regions=args.regions)
    title = "rightreasons view: " + " vs ".join(run.label for run in runs)
    print(write_text_atomic(args.out, render_page(view, title)))
    return 0
