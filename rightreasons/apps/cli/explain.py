"""`rightreasons explain`: explain a B-cos model's decisions on image files.

The model needs weights: `--checkpoint PATH` (what training wrote — a run directory, its model file or a checkpoint
directory — or, with `--model`, a release or Lightning checkpoint), `--pretrained` (the released ImageNet weights of
`--model`), or `--random-weights` to explain an untrained network on purpose; without any of them the command refuses
to run (an untrained B-cos network gives explanations that look plausible and mean nothing). What the model file and
the run recorded set the defaults: the input the model file records (size, crop and encoding,
`rightreasons.models.preprocessing`; `--size` overrides the size), else the image size the run trained at, else 224;
its class names (`--target` takes a name) and the link of the loss it trained with (`--probability`).

Each IMAGE is a file, or a directory whose image files (every suffix PIL reads, not recursive, sorted by name) are
all explained. Per image (shorter side resized, centre crop to the size, encoded for the model) it writes to `--out`:
`<stem>_input.png` (the model's view of the image), `<stem>_explanation.png` (the colour explanation `W(x)`, RGBA),
`<stem>_contributions.png` (`Σ_c W ⊙ x`, blue negative / red positive, symmetric limits) and `<stem>_figure.png`
(the three side by side, titled with the class name and its probability, with a colour bar). Class names come from
the weights (released weights, or a model file that names its classes); probabilities are `sigmoid(logit)`, the
link of the BCE loss B-cos models are trained with, unless the run trained with softmax cross-entropy or
`--probability softmax` says so. One line per image on stdout names the predicted and the explained class.
`--out` may not be an input directory (its next run would explain these outputs); each PNG is written atomically and
never through a symbolic link planted at its name.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from .arguments import examples, positive_int, torch_device

if TYPE_CHECKING:  # torch is imported only when the command runs, so that `--help` starts at once
    from torch import Tensor, nn

    from ...engine import TrainConfig

__all__ = ["build_model", "expand_images", "load_images", "register", "refuse_input_folder", "run", "save_pngs",
           "target_class"]

LINKS = {"sigmoid": "bce", "softmax": "ce"}
"""`--probability` choice → the classification loss whose link it is."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("explain", help="write B-cos explanations of images as PNGs",
                              description="Explain a B-cos model's decisions on image files: per image, the input, the "
                                          "colour explanation, the contribution map and a side-by-side figure with the "
                                          "class name, its probability and a colour scale (PNGs). The model needs "
                                          "weights: --checkpoint, --pretrained, or --random-weights on purpose.",
                              epilog=examples("rightreasons explain --model bcos_resnet50 --pretrained photo.jpg "
                                              "photos/ --out explained/",
                                              "rightreasons explain --checkpoint runs/voc/guided photos/ --out "
                                              "explained/ --target cat"))
    p.add_argument("images", nargs="+", type=Path, metavar="IMAGE",
                   help="image files (any format PIL reads), or directories: every image file in them")
    p.add_argument("--model", help="registered B-cos model name (not needed for what rightreasons training wrote)")
    weights = p.add_mutually_exclusive_group()
    weights.add_argument("--checkpoint", type=Path,
                         help="a run directory, its model.safetensors or a checkpoint directory (RUN/checkpoints/"
                              "step-N); with --model any weights file (release, Lightning checkpoint)")
    weights.add_argument("--pretrained", action="store_true", help="the released weights of --model")
    weights.add_argument("--random-weights", action="store_true",
                         help="explain --model with untrained, random weights (for testing the pipeline only)")
    p.add_argument("--num-classes", type=positive_int, help="number of classes of the checkpoint's classifier")
    p.add_argument("--target", help="class to explain, an index or a class name the model knows (default: the "
                                    "predicted class of each image)")
    p.add_argument("--size", type=positive_int, default=None,
                   help="resize the shorter side and centre-crop to SIZE (default: the input size the model file "
                        "records, else the size the run trained at, else 224)")
    p.add_argument("--probability", choices=sorted(LINKS), default=None,
                   help="how logits become the probability in the figure title: sigmoid (BCE-trained, the B-cos "
                        "recipe) or softmax (trained with softmax cross-entropy); default: the run's loss, else "
                        "sigmoid")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--device", type=torch_device, help="torch device (default: cuda when available, else cpu)")
    p.set_defaults(func=run)


def build_model(args: argparse.Namespace) -> tuple[nn.Module, TrainConfig | None]:
    """The B-cos model named by `--model` with the requested weights, or the one a run wrote (`--checkpoint`), and
    the config it was trained with when the run recorded one."""
    from ...models import capabilities, create_model, get_model_spec
    from ..tasks import load_trained

    config = None
    if args.model is None:
        if args.checkpoint is None or args.pretrained or args.random_weights or args.num_classes is not None:
            raise UsageError("without --model, pass only --checkpoint PATH of what rightreasons training wrote (a run "
                             "directory, its model file or a checkpoint directory: they name the architecture)")
        model, config = load_trained(args.checkpoint)
    else:
        get_model_spec(args.model.partition(".")[0])  # an unknown name is reported before missing weights
        if not (args.checkpoint or args.pretrained or args.random_weights):
            raise UsageError(f"--model {args.model} has no weights: pass --pretrained (the released ImageNet "
                             "weights), --checkpoint FILE (your trained weights), or --random-weights to explain an "
                             "untrained network on purpose")
        kwargs = {} if args.num_classes is None else {"num_classes": args.num_classes}
        model = create_model(args.model, pretrained=args.pretrained, checkpoint=args.checkpoint, **kwargs)
    caps = capabilities(model)
    if not caps.bcos:
        raise UsageError(f"{caps.name} is not a B-cos model: explain needs a dynamic linear B-cos network; see "
                         "`rightreasons models --bcos`")
    return model.eval(), config


def target_class(text: str | None, classes: tuple[str, ...] | None, num_classes: int) -> int | None:
    """`--target` as a class index: an index below ``num_classes`` or one of the model's class names."""
    if text is None:
        return None
    if text.isdigit():
        if int(text) >= num_classes:
            raise UsageError(f"--target {text}: the model has {num_classes} classes (0 to {num_classes - 1})")
        return int(text)
    if classes and text in classes:
        return classes.index(text)
    known = f"one of its class names {list(classes)}" if classes else "an index (the model records no class names)"
    raise UsageError(f"--target {text!r}: expected a class index or {known}")


def expand_images(paths: list[Path]) -> list[Path]:
    """The image files named: files as given, directories replaced by their image files (sorted, not recursive)."""
    from PIL import Image

    suffixes = set(Image.registered_extensions())
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            found.append(path)
            continue
        images = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
        if not images:
            raise UsageError(f"{path}: the directory holds no image files (none with a suffix PIL reads, such as "
                             ".png or .jpg; subdirectories are not searched)")
        found += images
    return found


def refuse_input_folder(out: Path, images: list[Path]) -> None:
    """Refuse an output folder that is one of the input folders: the next run would explain the images this one
    writes there (refused rather than skipped: a user's own image may be named like an output, ``cat_input.png``, and
    a folder read and written at once changes under the command). A subfolder is fine: folders are not searched
    recursively (:func:`expand_images`)."""
    for folder in images:
        if folder.is_dir() and folder.resolve() == out.resolve():
            raise UsageError(f"--out {out} is the input folder {folder}: the next run would explain the images "
                             f"written there as inputs; choose another folder (a subfolder such as "
                             f"{folder / 'explained'} is fine)")


def load_images(paths: list[Path], size: int, encoding: str = "bcos", crop_fraction: float = 1.0) -> Tensor:
    """Image files → batch `[N, C, size, size]` (shorter side resized to `size / crop_fraction`, centre crop, then
    encoded: `[r, g, b, 1-r, 1-g, 1-b]` in [0, 1] for B-cos models), with the data package's deterministic view."""
    import torch
    from torchvision.transforms import v2

    from ...data.io import read_image
    from ...data.transforms import base_view
    from ...encoding import encode

    if size < 1:
        raise UsageError(f"--size must be positive, got {size}")
    transform = v2.Compose([v2.ToDtype(torch.float32, scale=True), base_view(size, crop_fraction),
                            encode(encoding)])
    return torch.stack([transform(read_image(path)) for path in paths])


def _output_stems(paths: list[Path]) -> list[str]:
    """File stems, made unique with a `-2`, `-3`, ... suffix where images share a name."""
    seen: dict[str, int] = {}
    stems = []
    for path in paths:
        seen[path.stem] = seen.get(path.stem, 0) + 1
        stems.append(path.stem if seen[path.stem] == 1 else f"{path.stem}-{seen[path.stem]}")
    return stems


def save_pngs(out: Path, stem: str, image6: Tensor, weights: Tensor, title: str) -> None:
    """Write the input, colour explanation, contribution map and side-by-side figure of one image `[6, H, W]`."""
    from matplotlib.image import imsave

    from ...explain import save_explanation, to_rgba
    from ...explain.visualize import contribution_limits
    from ...fileio import atomic_write

    def save(name: str, pixels: Any, **colours: Any) -> None:  # atomically, never through a planted link
        atomic_write(out / f"{stem}_{name}.png", lambda tmp: imsave(tmp, pixels, format="png", **colours))

    image6, weights = image6.detach().float().cpu(), weights.detach().float().cpu()
    contributions = (image6 * weights).sum(0)
    limit = contribution_limits(contributions)
    save("input", image6[:3].permute(1, 2, 0).clamp(0, 1).numpy())
    save("explanation", to_rgba(image6, weights).numpy())
    save("contributions", contributions.numpy(), cmap="bwr", vmin=-limit, vmax=limit)
    save_explanation(out / f"{stem}_figure.png", image6, weights, title=title)


def run(args: argparse.Namespace) -> int:
    import torch

    from ...classification.loss import class_probabilities, resolve_classification_loss
    from ...explain import class_name, explain, prediction_caption
    from ...fileio import writable_directory
    from ...metrics.evaluation import require_finite_logits
    from ...models import capabilities
    from ...models.preprocessing import recorded_crop, recorded_size

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    refuse_input_folder(args.out, args.images)
    paths = expand_images(args.images)
    writable_directory(args.out, "--out", create=False)
    model, config = build_model(args)
    model = model.to(device)
    caps = capabilities(model)
    target = target_class(args.target, caps.classes, caps.num_classes)
    size = args.size or recorded_size(model, config.data.image_size if config is not None else 224)
    link = LINKS[args.probability] if args.probability else "bce" if config is None else \
        resolve_classification_loss(config.loss.classification, caps.bcos, multilabel=False)
    x = load_images(paths, size, caps.encoding, recorded_crop(model)).to(device)
    writable_directory(args.out, "--out")
    for path, stem, xi in zip(paths, _output_stems(paths), x):
        result = explain(model, xi[None], target=target)
        require_finite_logits(result.logits, str(args.checkpoint or args.model), [str(path)])
        probabilities = class_probabilities(result.logits, link)[0]
        predicted, target = int(result.logits.argmax(1)), int(result.target)
        caption = prediction_caption(probabilities, target, caps.classes, result.logits[0])
        save_pngs(args.out, stem, xi, result.weights[0], title=f"{path.name}: {caption}")
        print(f"{path}: predicted class {predicted} ({class_name(predicted, caps.classes)}), explained class "
              f"{target} ({class_name(target, caps.classes)}, p={float(probabilities[target]):.3f}) -> "
              f"{args.out / stem}_*.png")
    return 0
