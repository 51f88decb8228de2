"""``rightreasons distill | cache | analyze shift``: knowledge distillation with e²KD.

    rightreasons distill --config configs/distill/waterbirds100.yaml output_dir=runs/e2kd [--resume]
    rightreasons distill --config configs/distill/imagenet_bcos_densenet169_r18_50shot_frozen.yaml \
        --frozen runs/cache-dn169
    rightreasons cache --config configs/distill/imagenet_bcos_densenet169_r18_50shot_frozen.yaml --out runs/cache-dn169
    rightreasons cache --teacher runs/teacher --data synthetic-birds --image-size 64 --out DIR [--format compact]
    rightreasons cache --teacher runs/teacher --data synthetic-birds --image-size 64 --out DIR --check
    rightreasons analyze shift --model teacher=runs/teacher --model e2kd=runs/e2kd/checkpoints/step-000100 \
        --data synthetic-birds --split test --image-size 64 --max-shift 16 --out runs/shift

A model argument (``--teacher``, ``--model``) is a run — its directory, its model file or one of its checkpoint
directories (:func:`~rightreasons.engine.artifacts.locate_artifact`) — or, when it is no path, a registry name.

``distill`` and ``cache`` take ``--config FILE`` plus ``key.path=value`` overrides (validated; ``--print-config``
prints the config they resolve to and exits); under ``accelerate launch`` or ``torchrun`` they use every process
(``cache`` splits the shards among them). ``cache`` stopped by Ctrl-C says how many shards it kept (one line) and
exits with code 130; the same command run again finishes the cache.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import UsageError
from .arguments import (add_overwrite, add_print_config, add_resume, examples, non_negative_int, positive_int,
                        print_config, resume_and_overrides)

if TYPE_CHECKING:
    from ...distill import DistillConfig
    from ...engine.artifacts import RunArtifact

__all__ = ["register"]

logger = logging.getLogger(__name__)

EXIT_INTERRUPTED = 130
"""Exit code of a ``cache`` stopped by Ctrl-C (128 + SIGINT, what a shell reports for a process killed by it)."""

SHIFT_EXAMPLE = ("rightreasons analyze shift --model teacher=runs/teacher --model e2kd=runs/e2kd --data "
                 "synthetic-birds --split test --image-size 64 --max-shift 16 --out runs/shift")
"""The example of ``analyze`` and ``analyze shift``."""

DEFAULT_SHIFT_SIZE = 224
"""The input size of ``analyze shift`` when no model file records the resolution it was trained at."""


def _add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path,
                        help="YAML distillation config (schema: rightreasons.distill.config)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. distill.temperature=5")
    add_print_config(parser)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("distill", help="distil a teacher into a student (KD, e²KD, frozen e²KD, AT)",
                              epilog=examples("rightreasons distill --config configs/distill/waterbirds100.yaml "
                                              "output_dir=runs/e2kd --resume",
                                              "rightreasons distill --config configs/distill/"
                                              "imagenet_bcos_densenet169_r18_50shot_frozen.yaml --frozen "
                                              "runs/cache-dn169"))
    _add_config(p)
    p.add_argument("--frozen", type=Path, metavar="DIR", help="train on the cached teacher outputs in DIR "
                                                              "(same as distill.frozen=DIR)")
    add_resume(p)
    add_overwrite(p)
    p.set_defaults(func=run_distill)

    p = subparsers.add_parser("cache", help="compute a teacher's logits and explanations once per training image",
                              epilog=examples("rightreasons cache --config configs/distill/"
                                              "imagenet_bcos_densenet169_r18_50shot_frozen.yaml --out runs/cache-dn169",
                                              "rightreasons cache --teacher runs/teacher --data synthetic-birds "
                                              "--image-size 64 --out runs/cache --check"))
    _add_config(p)
    p.add_argument("--teacher", help="teacher: a run of rightreasons (its directory, model file or a checkpoint "
                                     "directory), or a registry name (teacher.name; weights with "
                                     "teacher.checkpoint=FILE)")
    p.add_argument("--data", help="dataset name (data.name)")
    p.add_argument("--root", help="dataset root directory (data.root)")
    p.add_argument("--split", help="split to cache (data.train_split, default train)")
    p.add_argument("--image-size", type=positive_int, help="training resolution (data.image_size)")
    p.add_argument("--out", type=Path, required=True, help="cache directory (a partial cache there is resumed)")
    p.add_argument("--batch-size", type=positive_int, help="images per teacher call (default data.eval_batch_size)")
    p.add_argument("--shard-size", type=positive_int, help="images per shard (default: about 256 MiB per shard)")
    p.add_argument("--format", metavar="NAME",
                   help="how the explanations are stored (distill.cache_format): float16 (default) or compact "
                        "(8-bit, deflate-compressed, cosine >= 0.995 to the map; ~40x smaller)")
    p.add_argument("--check", action="store_true",
                   help="write nothing: compare the cache in --out with the live teacher on training images under the "
                        "training augmentation (cosine similarity mean/worst, e²KD loss)")
    p.add_argument("--num-images", type=positive_int, default=64, help="images --check compares (default 64)")
    p.set_defaults(func=run_cache)

    p = subparsers.add_parser("analyze", help="analyses of trained models", epilog=examples(SHIFT_EXAMPLE))
    analyses = p.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    s = analyses.add_parser("shift", help="explanation similarity under diagonal image shifts, with a plot",
                            epilog=examples(SHIFT_EXAMPLE))
    s.add_argument("--model", action="append", required=True, metavar="[LABEL=]MODEL",
                   help="a run of rightreasons (its directory, model file or a checkpoint directory) or a registry "
                        "name; repeat for several curves")
    s.add_argument("--data", required=True, help="dataset name")
    s.add_argument("--root", help="dataset root directory")
    s.add_argument("--split", default="test", help="split to draw images from (default test)")
    s.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="dataset option (repeatable)")
    s.add_argument("--image-size", type=positive_int, default=None,
                   help=f"model input size (default: the data.image_size the model files were trained at, else "
                        f"{DEFAULT_SHIFT_SIZE})")
    s.add_argument("--max-shift", type=non_negative_int, default=32,
                   help="largest diagonal shift in pixels (default 32)")
    s.add_argument("--num-images", type=positive_int, default=64, help="images to average over (default 64)")
    s.add_argument("--batch-size", type=positive_int, default=16)
    s.add_argument("--explanation", default="auto", metavar="METHOD",
                   help="explanation compared: auto (W(x), bcos_weights, for B-cos models, GradCAM otherwise) or a "
                        "method of rightreasons.explain.METHODS, e.g. gradcam")
    s.add_argument("--layer", default="final", help="GradCAM layer (default final)")
    s.add_argument("--out", type=Path, required=True, help="output directory for shift.json and shift.png")
    s.set_defaults(func=run_shift)


def run_distill(args: argparse.Namespace) -> int:
    from accelerate import PartialState

    from ...engine import run
    from ..tasks import load_task_config

    resume, overrides = resume_and_overrides(args)
    overrides += [f"distill.frozen={args.frozen}"] if args.frozen else []
    config = _located_teacher(load_task_config("distill", args.config, overrides), args.config, overrides)
    if args.print_config:
        return print_config(config)
    summary = run(config, resume=resume, overwrite=args.overwrite)
    if PartialState().is_main_process:
        print(json.dumps({"best": summary["best"], "steps": summary["steps"], "output_dir": config.output_dir,
                          "test": summary.get("test")}))
    return 0


def _names_artifact(spec: str) -> bool:
    """Whether a model argument names a run artefact — an existing path, or one with a directory part — rather than a
    registry name."""
    return Path(spec).exists() or Path(spec).name != spec


def _teacher_overrides(teacher: str) -> list[str]:
    """``--teacher`` as config overrides: a registry name is ``teacher.name``; a run artefact
    (:func:`~rightreasons.engine.artifacts.locate_artifact`) is its weights file with the architecture the file records
    (``teacher.name=null``) or, for a checkpoint, the one its run trained."""
    from ...engine.artifacts import locate_artifact
    from ..tasks import trained_architecture

    if not _names_artifact(teacher):
        return [f"teacher.name={teacher}"]
    artifact = locate_artifact(teacher, "--teacher")
    architecture = trained_architecture(artifact)
    if architecture is None:
        return [f"teacher.checkpoint={artifact.weights}", "teacher.name=null"]
    name, kwargs = architecture
    return [f"teacher.checkpoint={artifact.weights}", f"teacher.name={name}", f"teacher.kwargs={json.dumps(kwargs)}"]


def _located_teacher(config: DistillConfig, path: str | None, overrides: list[str]) -> DistillConfig:
    """``config`` whose ``teacher.checkpoint`` (without ``teacher.name``) names a checkpoint directory of a run, whose
    weights file records no architecture, read as ``--teacher`` reads it (:func:`_teacher_overrides`): with the
    architecture its run trained. Any other teacher is left as written."""
    from ...engine.artifacts import locate_artifact
    from ..tasks import load_task_config

    teacher = config.teacher
    if teacher.name is not None or teacher.checkpoint is None or not Path(teacher.checkpoint).exists():
        return config
    if locate_artifact(teacher.checkpoint, "teacher.checkpoint").architecture_in_file:
        return config
    return load_task_config("distill", path, overrides + _teacher_overrides(teacher.checkpoint))


def run_cache(args: argparse.Namespace) -> int:
    from accelerate import PartialState

    from ...distill import check_cache, write_teacher_cache
    from ...fileio import writable_directory
    from ..tasks import load_task_config

    overrides = list(args.overrides) + (_teacher_overrides(args.teacher) if args.teacher else [])
    for flag, key in ((args.data, "data.name"), (args.root, "data.root"), (args.split, "data.train_split"),
                      (args.image_size, "data.image_size"), (args.format, "distill.cache_format")):
        if flag is not None:
            overrides.append(f"{key}={flag}")
    config = _located_teacher(load_task_config("distill", args.config, overrides), args.config, overrides)
    if args.print_config:
        return print_config(config)
    if args.check:
        print(json.dumps(check_cache(config, args.out, num_images=args.num_images)))
        return 0
    writable_directory(args.out, "cache directory", create=False)
    try:
        manifest = write_teacher_cache(config, args.out, batch_size=args.batch_size, shard_size=args.shard_size)
    except KeyboardInterrupt:  # Ctrl-C: every shard is renamed into place whole, so the rerun resumes
        if PartialState().is_main_process:
            written = len(list(Path(args.out).glob("shard-*.json")))
            print(f"rightreasons cache: interrupted; the {written} shards written so far are kept: run the same "
                  "command again to finish the cache", file=sys.stderr)
        return EXIT_INTERRUPTED
    if PartialState().is_main_process:
        print(json.dumps({"manifest": str(manifest)}))
    return 0


def _parse_options(items: list[str]) -> dict[str, object]:
    import yaml

    from ...config import read_yaml

    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--option {item!r} is not of the form KEY=VALUE")
        try:
            options[key] = read_yaml(value)
        except yaml.YAMLError as e:
            raise UsageError(f"--option {item!r}: the value is not a valid YAML scalar: {e}") from e
    return options


def _model_source(spec: str) -> tuple[str, str, RunArtifact | None]:
    """``[LABEL=]SOURCE`` → (label, source, the run artefact it names or ``None`` for a registry name); the label
    defaults to the path's stem or the name."""
    from ...engine.artifacts import locate_artifact

    label, sep, source = spec.partition("=")
    if not sep:
        label, source = Path(spec).stem if _names_artifact(spec) else spec, spec
    return label, source, locate_artifact(source, "--model") if _names_artifact(source) else None


def _trained_size(artifact: RunArtifact | None) -> int | None:
    """``data.image_size`` of the training config of a run artefact (recorded by the run, or in a model file's
    metadata by training), or None."""
    from ...models.weights import read_metadata

    if artifact is None:
        return None
    config = artifact.config
    try:
        if config is None:
            config = json.loads(read_metadata(artifact.weights)["config"])
        return int(config["data"]["image_size"])
    except (KeyError, TypeError, ValueError):  # no or another config: not a file of our training
        return None


def _shift_size(sources: dict[str, RunArtifact | None]) -> int:
    """The input size of the shift analysis: the one resolution the runs were trained at, else
    :data:`DEFAULT_SHIFT_SIZE`; models trained at different resolutions need ``--image-size``."""
    sizes = {s: size for s, artifact in sources.items() if (size := _trained_size(artifact)) is not None}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{s} at {size} px" for s, size in sizes.items())
        raise UsageError(f"the models were trained at different resolutions ({listed}); choose one with --image-size")
    return next(iter(sizes.values()), DEFAULT_SHIFT_SIZE)


def run_shift(args: argparse.Namespace) -> int:
    from torch.utils.data import DataLoader, Subset
    from tqdm.auto import tqdm

    from ...data import collate, eval_transform, load_dataset
    from ...distill import EXPLANATION_CHOICES, resolve_explanation, shift_similarity
    from ...encoding import reencode
    from ...fileio import writable_directory, write_json_atomic
    from ...models import capabilities, create_model
    from ...reporting import plot_shift_curves
    from ..tasks import load_trained

    explanations = [c for c in EXPLANATION_CHOICES if c != "none"]
    if args.explanation not in explanations:
        raise UsageError(f"--explanation {args.explanation!r}: expected one of {', '.join(explanations)}")
    writable_directory(args.out, "--out", create=False)
    specs = [_model_source(spec) for spec in args.model]
    size = args.image_size if args.image_size is not None else \
        _shift_size({source: artifact for _, source, artifact in specs})
    canvas = size + args.max_shift
    dataset = load_dataset(args.data, args.root, args.split, transform=eval_transform(canvas, encoding="none",
                                                                                      crop_fraction=1.0),
                           **_parse_options(args.option))
    subset = Subset(dataset, range(min(args.num_images, len(dataset))))
    shifts = list(range(args.max_shift + 1))
    curves = {}
    for k, (label, source, artifact) in enumerate(specs, 1):
        model = create_model(source) if artifact is None else load_trained(artifact)[0]
        caps = capabilities(model)
        method = resolve_explanation(args.explanation, caps.bcos)
        logger.info("[%d/%d] %s: %s explanations of %d images at %d px, shifted by 0 … %d px", k, len(specs), label,
                    method, len(subset), size, args.max_shift)
        loader = DataLoader(subset, batch_size=args.batch_size, collate_fn=collate)
        batches = (reencode(b["image"], "none", caps.encoding) for b in tqdm(loader, desc=label, disable=None))
        curves[label] = shift_similarity(model, batches, size, shifts, method, args.layer).tolist()
    result = {"shifts": shifts, "curves": curves, "data": args.data, "split": args.split,
              "image_size": size, "images": len(subset)}
    write_json_atomic(args.out / "shift.json", result)
    plot_shift_curves(args.out / "shift.png", shifts, curves,
                      title=f"{args.data} {args.split}: explanation vs shift")
    print(json.dumps({"json": str(args.out / "shift.json"), "plot": str(args.out / "shift.png")}))
    return 0
