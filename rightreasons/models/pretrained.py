"""The published weights of the B-cos v2 release and how to fetch them.

:data:`PRETRAINED` maps a *weights name* to its release entry; each model file registers the weights of its family
(:func:`register_pretrained`), as timm's model files carry their pretrained configs. The weights name is the registry
name of the architecture for the default weights (``"bcos_resnet50"``) and ``<registry name>.<tag>`` for further weights
of the same architecture, in timm's ``arch.tag`` convention (``"bcos_resnet50.long"``: the 600-epoch recipe). So
``create_model("bcos_resnet50", pretrained=True)`` loads the default weights and
``create_model("bcos_resnet50.long", pretrained=True)`` (or ``timm.create_model("bcos_resnet50.long", pretrained=True)``)
the long-recipe ones.

Each entry is also what torchvision's weights enums are: :meth:`PretrainedWeights.transforms` is the release's
evaluation preprocessing (PIL image or uint8/float tensor → the encoded input the model takes) and
:attr:`PretrainedWeights.meta` holds the class names (``meta["categories"]``, ImageNet's 1000), the accuracy, the
recipe and the logit convention. ``create_model(name, pretrained=True)`` puts the class names on the model
(``model.classes``) when it keeps the 1000-class classifier.

Files are GitHub release assets named ``<experiment>-<sha256[:10]>.pth``. :func:`download_pretrained` keeps them in the
torch hub checkpoint directory (``$TORCH_HOME/hub/checkpoints``), verifies the hash prefix of a file found there, and
otherwise downloads it through :func:`torch.hub.download_url_to_file` with the same check. Without network access it
fails within seconds (a bounded connection probe precedes the download) and says which file to put where.
"""

from __future__ import annotations

import re
import socket
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torchvision.models import ResNet50_Weights
from torchvision.transforms import v2

from ..encoding import encode
from ..errors import CheckpointError, UnknownNameError, WeightsUnavailableError
from ..fileio import file_digest, writable_directory
from .weights import RELEASE_LOGIT_BIAS

__all__ = ["PRETRAINED", "PretrainedWeights", "download_pretrained", "get_pretrained", "imagenet_categories",
           "pretrained_table", "register_pretrained"]

RELEASE_URL = "https://github.com/B-cos/B-cos-v2/releases/download/v0.0.1-weights"
CONNECT_TIMEOUT_S = 3.0
"""How long :func:`download_pretrained` waits for the server (name lookup and TCP connect) before giving up."""

_HASH_IN_NAME = re.compile(r"-([0-9a-f]{8,64})\.pth$")
CROP_SIZE = 224
"""The side of the release's evaluation crop (every released model takes 224 × 224 images)."""


@cache
def imagenet_categories() -> tuple[str, ...]:
    """The 1000 ImageNet class names in logit order (torchvision's list, shared by every ImageNet model)."""
    return tuple(ResNet50_Weights.IMAGENET1K_V1.meta["categories"])


@dataclass(frozen=True)
class PretrainedWeights:
    """One released weights file.

    Attributes:
        model: registry name of the architecture the weights fit.
        hub_name: the release's ``torch.hub`` / ``bcos.models.pretrained`` entry point (e.g. ``"resnet50_long"``).
        experiment: ``<base network>/<experiment>`` in the release's experiment configs.
        file_name: the release asset, ``<name>-<sha256[:10]>.pth``.
        top1: ImageNet top-1 accuracy (%) reported by the release.
        eval_resize: the release's evaluation transform: resize the shorter side to this (bilinear), centre-crop 224
            (256; 232 for the ``bcos_final_long`` experiments).
        encoding: the input encoding the model takes (:mod:`rightreasons.encoding`): ``"bcos"`` for B-cos models
            (``[r, g, b, 1-r, 1-g, 1-b]``), ``"normalize"`` (ImageNet mean/std) for the standard ViTs.
    """

    model: str
    hub_name: str
    experiment: str
    file_name: str
    top1: float
    eval_resize: int = 256
    encoding: str = "bcos"

    def transforms(self) -> v2.Compose:
        """The release's evaluation preprocessing, torchvision-style: a PIL image (or a ``[3, H, W]`` uint8 or float
        tensor in [0, 1]) → the encoded ``[C, 224, 224]`` float input (``C`` = 6 for B-cos models): shorter side
        resized to :attr:`eval_resize` (bilinear, antialiased), centre crop 224, encoded."""
        return v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                           v2.Resize(self.eval_resize, interpolation=v2.InterpolationMode.BILINEAR, antialias=True),
                           v2.CenterCrop(CROP_SIZE), encode(self.encoding)])

    @property
    def meta(self) -> dict[str, Any]:
        """What torchvision's ``Weights.meta`` holds, for these weights: ``categories`` (class names in logit order),
        ``num_classes``, ``recipe`` (the release experiment), ``_metrics`` (ImageNet-1K top-1), ``encoding``,
        ``crop_size`` / ``resize_size``, ``logit_bias`` (the fixed bias ``−log(999)``; see
        :data:`~rightreasons.models.weights.RELEASE_LOGIT_BIAS`), ``loss`` (``"bce"`` for the B-cos models, so their
        class probabilities are ``sigmoid(logits)``; ``None`` where the release does not say), ``url``, ``file_name``
        and ``hub_name``."""
        categories = imagenet_categories()
        return {"categories": list(categories), "num_classes": len(categories), "recipe": self.experiment,
                "_metrics": {"ImageNet-1K": {"acc@1": self.top1}}, "encoding": self.encoding,
                "crop_size": CROP_SIZE, "resize_size": self.eval_resize,
                "logit_bias": RELEASE_LOGIT_BIAS if self.encoding == "bcos" else None,
                "loss": "bce" if self.encoding == "bcos" else None,
                "url": self.url, "file_name": self.file_name, "hub_name": self.hub_name}

    @property
    def url(self) -> str:
        return f"{RELEASE_URL}/{self.file_name}"

    @property
    def sha256_prefix(self) -> str:
        """The leading hex digits of the file's SHA-256, as written in its name."""
        match = _HASH_IN_NAME.search(self.file_name)
        if match is None:
            raise ValueError(f"release file name {self.file_name!r} carries no '-<sha256 prefix>.pth' suffix")
        return match.group(1)


PRETRAINED: dict[str, PretrainedWeights] = {}
"""Weights name → release entry (see the module docstring for the naming); each model file registers the weights of
its family (:func:`register_pretrained`), so the table is complete once :mod:`rightreasons.models` is imported."""


def register_pretrained(name: str, hub_name: str, experiment: str, file_name: str, top1: float) -> PretrainedWeights:
    """Register the released weights ``name`` (``<registry name>[.<tag>]``) of the model file that calls it: the
    release's hub entry point, experiment, file and ImageNet top-1. Experiments of the ``bcos_final_long`` recipe
    evaluate at resize 232, the others at 256; ``bcos_*`` models read the B-cos encoding, the others ImageNet's."""
    if name in PRETRAINED:
        raise ValueError(f"released weights {name!r} are already registered")
    weights = PretrainedWeights(name.split(".")[0], hub_name, experiment, file_name, top1,
                                eval_resize=232 if experiment.startswith("bcos_final_long/") else 256,
                                encoding="bcos" if name.startswith("bcos_") else "normalize")
    PRETRAINED[name] = weights
    return weights


def get_pretrained(name: str) -> PretrainedWeights:
    """The release entry for a weights name; an unknown name raises
    :class:`~rightreasons.errors.UnknownNameError` listing the names with weights."""
    try:
        return PRETRAINED[name]
    except KeyError:
        names = ", ".join(sorted(PRETRAINED))
        raise UnknownNameError(f"no released weights for {name!r}; weights exist for: {names}") from None


def pretrained_table() -> str:
    """The release table as Markdown (weights name, hub name, experiment, file, ImageNet top-1)."""
    lines = ["| weights name | hub name | experiment | file | top-1 (%) |", "|---|---|---|---|---|"]
    lines += [f"| `{k}` | `{w.hub_name}` | `{w.experiment}` | [{w.file_name}]({w.url}) | {w.top1:.1f} |"
              for k, w in PRETRAINED.items()]
    return "\n".join(lines)


def _verify(path: Path, weights: PretrainedWeights) -> None:
    actual = file_digest(path)
    if not actual.startswith(weights.sha256_prefix):
        raise CheckpointError(f"{path}: SHA-256 {actual[:len(weights.sha256_prefix)]}... does not match the prefix "
                              f"{weights.sha256_prefix} in the release file name (corrupt or different file); "
                              f"delete it and download {weights.url} again")


def _probe(url: str, timeout: float) -> str | None:
    """``None`` when a TCP connection to the server of ``url`` (or to the configured proxy) opens within ``timeout``
    seconds, else the reason. Runs in a daemon thread so that a slow name lookup cannot exceed the deadline."""
    host = urllib.parse.urlsplit(url).hostname or ""
    port = 443
    proxy = urllib.request.getproxies().get("https")
    if proxy and not urllib.request.proxy_bypass(host):
        parts = urllib.parse.urlsplit(proxy if "//" in proxy else f"//{proxy}")
        host, port = parts.hostname or "", parts.port or 80
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as e:
            outcome.append(f"cannot connect to {host}:{port}: {e}")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome[0] if outcome else f"no answer from {host}:{port} within {timeout:g} s"


def download_pretrained(name: str, *, progress: bool = True) -> Path:
    """Path of the released weights ``name`` (a key of :data:`PRETRAINED`) in the torch hub checkpoint directory.

    A file already there is used after its hash prefix is verified; otherwise it is downloaded (hash-checked).

    Raises:
        UnknownNameError: no released weights under ``name`` (the message lists the names that have them).
        CheckpointError: the file in the hub directory does not match the hash in its release name.
        WeightsUnavailableError: the file is missing and the server cannot be reached; the message gives the URL
            and the path to put the file at.
    """
    weights = get_pretrained(name)
    directory = Path(torch.hub.get_dir()) / "checkpoints"
    target = directory / weights.file_name
    if target.is_file():
        _verify(target, weights)
        return target
    reason = _probe(weights.url, CONNECT_TIMEOUT_S)
    if reason is not None:
        raise WeightsUnavailableError(
            f"the weights {name!r} ({weights.file_name}) are not in {directory} and cannot be downloaded ({reason}). "
            f"Download {weights.url} on a machine with internet access and put it at {target} "
            f"(the torch hub checkpoint directory; TORCH_HOME moves it), or name the file directly: in a config "
            f"model.pretrained=false model.checkpoint=PATH (teacher.checkpoint for a teacher), in Python "
            f"create_model({weights.model!r}, checkpoint=PATH)")
    writable_directory(directory, "torch hub checkpoint directory")
    torch.hub.download_url_to_file(weights.url, str(target), hash_prefix=weights.sha256_prefix, progress=progress)
    return target
