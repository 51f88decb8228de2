"""`rightreasons judge`: models × explanation methods and layers, scored by the explanation-quality metrics on the
same images, as a table (mean and 95 % bootstrap interval per metric) and a figure.

    rightreasons judge runs/baseline runs/guided --methods bcos,ixg --out judged

Each MODEL is a run directory, its model file, a checkpoint directory or a model directory written by
`rightreasons export` (:func:`~rightreasons.engine.artifacts.locate_artifact`). The images are the first `--images`
of `--split` (default: the test split) of the dataset the runs were trained on, built with that split's options
(`data.split_options`), so a run is judged on the images its own report scored; `--dataset` (with `--root` and
`--option KEY=VALUE`) judges on another dataset, and is needed for a bare model file. `--out` receives `table.md`,
`table.csv`, `scores.csv` (per image) and `figure.png` (:mod:`rightreasons.judging`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from .arguments import add_regions, examples, non_negative_int, positive_int, torch_device

if TYPE_CHECKING:  # torch and the judging are imported when the command runs, so that --help starts at once
    from ...data import AnnotatedDataset
    from ...engine import TrainConfig
    from ...judging import JudgedModel

__all__ = ["judge_runs", "register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "judge", help="score models x explanation methods with the explanation-quality metrics: table and figure",
        description="Score every MODEL with every explanation method and layer by the explanation-quality metrics "
                    "(docs/metrics.md) on the same images: the run's own test images by default. Writes table.md and "
                    "table.csv (mean and 95 %% percentile-bootstrap interval over images per metric), scores.csv "
                    "(per image) and figure.png into --out.",
        epilog=examples("rightreasons judge runs/baseline runs/guided --out judged",
                        "rightreasons judge runs/guided exported/guided --methods bcos,ixg,gradcam "
                        "--metrics epg,pointing_game,insertion_deletion --images 100 --out judged"))
    p.add_argument("models", nargs="+", type=Path, metavar="MODEL",
                   help="a run directory, its model.safetensors, a checkpoint directory or an exported model "
                        "directory")
    p.add_argument("--out", type=Path, required=True, help="the directory to write the table and figure into")
    p.add_argument("--methods", default=None,
                   help="comma-separated explanation methods with maps: bcos, ixg, gradcam, intgrad (default: bcos "
                        "when every model is a B-cos model, else ixg)")
    p.add_argument("--layers", default=None,
                   help="comma-separated layers each method explains (default: each method's default layer)")
    p.add_argument("--metrics", default=None,
                   help="comma-separated metrics (default: the cheap ones, epg, iou, pointing_game, relevance_rank, "
                        "top_k, sparseness, complexity; opt-in: insertion_deletion, faithfulness_correlation, "
                        "sensitivity, infidelity, randomisation, road, irof, grid_pointing_game)")
    p.add_argument("--images", type=positive_int, default=None, metavar="N",
                   help="judge the first N images of the split (default: all)")
    p.add_argument("--split", default=None, help="the split (default: test, or val for datasets without one)")
    p.add_argument("--dataset", default=None,
                   help="judge on this dataset instead of the one the runs were trained on (needed for a bare model "
                        "file)")
    p.add_argument("--root", default=None, help="the --dataset's directory (not for the synthetic datasets)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a loader option of --dataset (repeatable), e.g. --option n=200")
    p.add_argument("--size", type=positive_int, default=None,
                   help="image side in pixels (default: the one each model file records, else its run's)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="images per batch (default: 32)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seeds the randomised metrics and the bootstrap (default: 0)")
    add_regions(p, "boxes")
    p.add_argument("--device", type=torch_device, help="torch device (default: cuda when available, else cpu)")
    p.set_defaults(func=run)


def _load(path: Path, label: str, size: int | None) -> tuple[JudgedModel, TrainConfig | None]:
    """The model ``path`` holds as a :class:`~rightreasons.judging.JudgedModel`, with the config it was trained
    with (``None`` for a bare model file); its size: ``size``, else the recorded one, else its config's."""
    from ...engine.artifacts import locate_artifact
    from ...judging import JudgedModel
    from ...models.preprocessing import recorded_size
    from ..tasks import load_trained

    model, config = load_trained(locate_artifact(path, "MODEL"))
    size = size or recorded_size(model, config.data.image_size if config else None)
    if size is None:
        raise UsageError(f"MODEL {path}: its model file records no input size and has no run config; pass --size")
    return JudgedModel(label, model, size), config


def _dataset(paths: Sequence[Path], configs: Sequence[TrainConfig | None], split: str | None, dataset: str | None,
             root: str | None, options: dict[str, Any]) -> tuple[AnnotatedDataset, str]:
    """The judged split and its name: of ``dataset`` with ``options`` when given, else of the dataset all runs
    were trained on, with the split's own options."""
    from ...data import default_test_split, load_dataset

    if dataset is not None:
        split = split or default_test_split(dataset)
        return load_dataset(dataset, root, split, **options), split
    if root is not None or options:
        raise UsageError("--root and --option describe --dataset; give --dataset with them")
    bare = [str(p) for p, c in zip(paths, configs) if c is None]
    if bare:
        raise UsageError(f"MODEL {bare[0]}: a model file without its run's config, so its data is unknown; name the "
                         "run directory or an exported model directory, or pass --dataset")
    data = configs[0].data
    split = split or default_test_split(data.name)
    seen = {(c.data.name, c.data.root and str(Path(c.data.root).resolve()), repr(c.data.options_for(split))): p
            for p, c in zip(paths, configs)}
    if len(seen) > 1:
        first, other = list(seen.values())[:2]
        raise UsageError(f"MODEL {first} and {other} were trained on different data; pass --dataset to judge both on "
                         "one")
    return load_dataset(data.name, data.root, split, **data.options_for(split)), split


def judge_runs(paths: Sequence[str | Path], out: str | Path, *, methods: Sequence[str] | None = None,
               layers: Sequence[str | None] = (None,), metrics: str | None = None, images: int | None = None,
               split: str | None = None, dataset: str | None = None, root: str | None = None,
               options: dict[str, Any] | None = None, size: int | None = None, batch_size: int = 32,
               device: str | None = None, seed: int = 0, regions: str = "boxes") -> dict[str, Path]:
    """What `rightreasons judge` does, for a notebook: judge the models at ``paths`` (module docstring) and write
    the report into ``out``; returns what → path (:data:`~rightreasons.judging.FILES`). ``metrics`` is a
    comma-separated list (``None``: the cheap ones); ``methods`` ``None``: bcos for B-cos models, else ixg;
    ``regions``: what the localisation metrics score against (boxes by default)."""
    import torch

    from ...fileio import writable_directory
    from ...judging import explanations, judge, parse_metrics, write_report
    from ...models import capabilities
    from ...viewer import run_labels

    names = parse_metrics(metrics)
    out = writable_directory(out, "--out")
    paths = [Path(p) for p in paths]
    loaded = [_load(p, label, size) for p, label in zip(paths, run_labels(paths))]
    models, configs = [m for m, _ in loaded], [c for _, c in loaded]
    data, split = _dataset(paths, configs, split, dataset, root, options or {})
    methods = methods or ["bcos" if all(capabilities(m.model).bcos for m in models) else "ixg"]
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    judgement = judge(models, data, explanations(methods, layers), names, images=images, batch_size=batch_size,
                      device=device, seed=seed, regions=regions)
    return write_report(judgement, out, seed)


def _listed(text: str | None) -> list[str] | None:
    return None if text is None else [w.strip() for w in text.split(",") if w.strip()]


def run(args: argparse.Namespace) -> int:
    from ...config import apply_overrides

    paths = judge_runs(args.models, args.out, methods=_listed(args.methods), layers=_listed(args.layers) or [None],
                       metrics=args.metrics, images=args.images, split=args.split, dataset=args.dataset,
                       root=args.root, options=apply_overrides({}, args.option), size=args.size,
                       batch_size=args.batch_size, device=args.device, seed=args.seed, regions=args.regions)
    print("\n".join(str(p) for p in paths.values()))
    return 0
