"""``rightreasons explain``: explain a B-cos model's decisions on image files.

For each image (resized and centre-cropped to ``--size``, encoded as ``[r, g, b, 1-r, 1-g, 1-b]``) it writes to
``--out``: ``<stem>_input.png`` (the model's view of the image), ``<stem>_explanation.png`` (the colour explanation
``W(x)``, RGBA), ``<stem>_contributions.png`` (``Σ_c W ⊙ x``, blue negative / red positive, symmetric limits) and
``<stem>_figure.png`` (the three side by side). It prints the predicted and the explained class per image.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from matplotlib.image import imsave
from torch import Tensor, nn
from torchvision.transforms import v2

from ..encoding import AddInverse
from ..data.io import open_image
from ..errors import UsageError
from ..explain import explain, save_explanation, to_rgba
from ..explain.visualize import contribution_limits
from ..hub import capabilities, create_model, load_model

__all__ = ["build_model", "load_images", "register", "run", "save_pngs"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("explain", help="write B-cos explanations of images as PNGs",
                              description="Explain a B-cos model's decisions on image files: per image, the input, the "
                                          "colour explanation, the contribution map and a side-by-side figure (PNGs).")
    p.add_argument("images", nargs="+", type=Path, metavar="IMAGE", help="image files (any format PIL reads)")
    p.add_argument("--model", help="registered B-cos model name (optional with a checkpoint written by rightreasons)")
    weights = p.add_mutually_exclusive_group()
    weights.add_argument("--checkpoint", type=Path, help="weights file (release, Lightning or rightreasons checkpoint)")
    weights.add_argument("--pretrained", action="store_true", help="the released weights of --model")
    p.add_argument("--num-classes", type=int, help="number of classes of the checkpoint's classifier")
    p.add_argument("--target", type=int, help="class to explain (default: the predicted class of each image)")
    p.add_argument("--size", type=int, default=224, help="resize the shorter side and centre-crop to SIZE (224)")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device")
    p.set_defaults(func=run)


def _require_bcos(model: nn.Module) -> nn.Module:
    caps = capabilities(model)
    if not caps.bcos:
        raise UsageError(f"{caps.name} is not a B-cos model: explain needs a dynamic linear B-cos network; see "
                         "`rightreasons models --bcos`")
    return model.eval()


def build_model(args: argparse.Namespace) -> nn.Module:
    """The B-cos model named by ``--model`` with the requested weights, or the model stored in ``--checkpoint``."""
    if args.model is None:
        if args.checkpoint is None or args.pretrained or args.num_classes is not None:
            raise UsageError("without --model, pass only --checkpoint PATH of a model saved by rightreasons "
                             "(the file names the architecture and its arguments)")
        return _require_bcos(load_model(args.checkpoint))
    kwargs = {} if args.num_classes is None else {"num_classes": args.num_classes}
    return _require_bcos(create_model(args.model, pretrained=args.pretrained, checkpoint=args.checkpoint, **kwargs))


def load_images(paths: list[Path], size: int) -> Tensor:
    """Image files → encoded batch ``[N, 6, size, size]`` in [0, 1] (shorter side resized, centre crop)."""
    if size < 1:
        raise UsageError(f"--size must be positive, got {size}")
    transform = v2.Compose([v2.ToImage(), v2.Resize(size, antialias=True), v2.CenterCrop(size),
                            v2.ToDtype(torch.float32, scale=True), AddInverse()])
    return torch.stack([transform(open_image(path)) for path in paths])


def _output_stems(paths: list[Path]) -> list[str]:
    """File stems, made unique with a ``-2``, ``-3``, ... suffix where images share a name."""
    seen: dict[str, int] = {}
    stems = []
    for path in paths:
        seen[path.stem] = seen.get(path.stem, 0) + 1
        stems.append(path.stem if seen[path.stem] == 1 else f"{path.stem}-{seen[path.stem]}")
    return stems


def save_pngs(out: Path, stem: str, image6: Tensor, weights: Tensor, title: str) -> None:
    """Write the input, colour explanation, contribution map and side-by-side figure of one image ``[6, H, W]``."""
    image6, weights = image6.detach().float().cpu(), weights.detach().float().cpu()
    contributions = (image6 * weights).sum(0)
    limit = contribution_limits(contributions)
    imsave(out / f"{stem}_input.png", image6[:3].permute(1, 2, 0).clamp(0, 1).numpy())
    imsave(out / f"{stem}_explanation.png", to_rgba(image6, weights).numpy())
    imsave(out / f"{stem}_contributions.png", contributions.numpy(), cmap="bwr", vmin=-limit, vmax=limit)
    save_explanation(out / f"{stem}_figure.png", image6, weights, title=title)


def run(args: argparse.Namespace) -> int:
    device = torch.device(args.device)
    model = build_model(args).to(device)
    x = load_images(args.images, args.size).to(device)
    args.out.mkdir(parents=True, exist_ok=True)
    for path, stem, xi in zip(args.images, _output_stems(args.images), x):
        result = explain(model, xi[None], target=args.target)
        predicted, target = int(result.logits.argmax(1)), int(result.target)
        logit = float(result.logits[0, target])
        save_pngs(args.out, stem, xi, result.weights[0], title=f"{path.name}: class {target} (logit {logit:.2f})")
        print(f"{path}: predicted class {predicted}, explained class {target} (logit {logit:.3f}) -> "
              f"{args.out / stem}_*.png")
    return 0
