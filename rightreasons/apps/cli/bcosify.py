"""``rightreasons bcosify``: convert a standard model into a B-cos model and write it as a loadable model file.

The standard model is ``--model NAME`` (a registered standard twin, e.g. ``resnet50``) with ``--checkpoint`` weights
(torchvision or any layout :func:`rightreasons.load_weights` reads) or ``--pretrained`` ones, or — without
``--model`` — a model file written by rightreasons (``runs/<run>/model.safetensors``). It is converted with
:func:`rightreasons.bcosify` and saved with :func:`rightreasons.save_model`: :func:`rightreasons.load_model` rebuilds
it, and a training config fine-tunes it with ``model: {name: bcosified_<NAME>, checkpoint: FILE}`` (the printed line
says which name and arguments).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ...choices import WEIGHT_MODES
from ...errors import UsageError
from .arguments import examples, positive_int

if TYPE_CHECKING:  # torch and the zoo are imported only when the command runs, so that `--help` starts at once
    from torch import nn

__all__ = ["build_source", "register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bcosify", help="convert a standard model into a B-cos model file",
                              description="Convert a standard ResNet, DenseNet or ViT into a B-cos network "
                                          "(B-cosification) and write it as a model file that load_model rebuilds.",
                              epilog=examples("rightreasons bcosify --model resnet50 --checkpoint weights.pth --out "
                                              "converted.safetensors",
                                              "rightreasons bcosify --model resnet50 --pretrained --out "
                                              "bcos_resnet50.safetensors"))
    p.add_argument("--model", help="registered standard model name, e.g. resnet50 (optional with a checkpoint "
                                   "written by rightreasons)")
    weights = p.add_mutually_exclusive_group()
    weights.add_argument("--checkpoint", type=Path, help="weights of the standard model (any layout load_weights "
                                                         "reads, or a rightreasons model file)")
    weights.add_argument("--pretrained", action="store_true", help="the released weights of --model")
    p.add_argument("--num-classes", type=positive_int, help="classes of the checkpoint's classifier (with --model)")
    p.add_argument("--b", type=float, default=2.0, help="B-cos exponent B (2: the recipe; 1 keeps the function)")
    p.add_argument("--keep-bias", action="store_true", help="keep every bias (the recipe removes them)")
    p.add_argument("--keep-maxpool", action="store_true", help="keep the stem's max-pooling (the recipe averages)")
    p.add_argument("--weight-mode", choices=WEIGHT_MODES, default="raw",
                   help="raw: pretrained weights as they are (the recipe); gain: unit norm times a learnt gain")
    p.add_argument("--mean", type=float, nargs=3, help="RGB mean the model was trained with (default ImageNet's)")
    p.add_argument("--std", type=float, nargs=3, help="RGB std the model was trained with (default ImageNet's)")
    p.add_argument("--logit-bias", type=float,
                   help="fixed logit bias (default -log(C - 1) without biases, 0 with --keep-bias)")
    p.add_argument("--out", type=Path, required=True, help="the model file to write (.safetensors)")
    p.set_defaults(func=run)


def build_source(args: argparse.Namespace) -> nn.Module:
    """The standard model named by ``--model`` with the requested weights, or the model stored in ``--checkpoint``."""
    from ...models import create_model, load_model

    if args.model is None:
        if args.checkpoint is None or args.pretrained or args.num_classes is not None:
            raise UsageError("without --model, pass only --checkpoint PATH of a model file written by rightreasons "
                             "(the file names the architecture and its arguments)")
        return load_model(args.checkpoint)
    kwargs = {} if args.num_classes is None else {"num_classes": args.num_classes}
    return create_model(args.model, pretrained=args.pretrained, checkpoint=args.checkpoint, **kwargs)


def run(args: argparse.Namespace) -> int:
    from ...engine.artifacts import refuse_run_file
    from ...fileio import writable_file
    from ...models import save_model
    from ...models.bcosify import BcosifyOptions, bcosify

    refuse_run_file(args.out, "--out")
    writable_file(args.out, "--out")
    normalisation = {k: v for k, v in (("mean", args.mean), ("std", args.std)) if v is not None}
    converted = bcosify(build_source(args), b=args.b, keep_bias=args.keep_bias,
                        maxpool_to_avgpool=not args.keep_maxpool, weight_mode=args.weight_mode,
                        logit_bias=args.logit_bias, **normalisation)
    if getattr(converted, "model_args", None) is None:
        raise UsageError(f"{type(converted).__name__}: the converted model has no registered architecture "
                         "(bcosified_<name>), so no model file can describe it")
    path = save_model(converted, args.out)
    name, kwargs = converted.model_args["name"], converted.model_args["kwargs"]
    defaults = BcosifyOptions().kwargs()
    config = {k: v for k, v in kwargs.items() if k != "num_classes" and (k not in defaults or defaults[k] != v)}
    print(f"wrote {path}: {name}, {json.dumps(kwargs)}")
    model = {"name": name, "checkpoint": str(path), "kwargs": config}
    print(f"fine-tune it with the training config: model: {json.dumps(model)}")
    return 0
