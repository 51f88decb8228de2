"""Shared test settings (deterministic seeds and one torch thread) and the tiny models several test packages use.

``make test`` runs two xdist workers on the two CI cores; with torch's default of one thread per core each worker
would oversubscribe the machine, and the tests' many small tensor operations are slower with intra-op threads anyway.
``OMP_NUM_THREADS=1`` is set as well, so every process a test starts (the CLI, ``torchrun``, the study and benchmark
scripts) also runs on one thread: with torch's default, a quick study subprocess took 97 s instead of 17 s beside
the other worker and ran into its timeout.

The tiny models (a named-stage conv net, optionally an X-DNN, and a three-stage B-cos ResNet) are exposed as factory
fixtures — ``tiny_cnn``, ``tiny_bcos_resnet`` and ``bcos_input`` — so that test modules never import each other.

So are the writers of tiny, format-faithful copies of the real datasets' layouts — ``write_voc`` (VOCdevkit/VOC2007:
JPEGs, XML annotations with pose, truncated and difficult flags, ImageSets, a segmentation), ``write_coco``
(instances JSON with polygon and crowd RLE segmentations, an image without annotations) and ``write_waterbirds``
(``metadata.csv`` with the release's columns, images, the box file and CUB-style bird masks) — used by the loader
tests (``tests/data``) and the quickstart chains (``tests/quickstarts``).

Tests on several processes use ``free_port``, ``gloo_processes`` (a function of the test on two processes of one gloo
group) and ``launch`` (the command line under ``torchrun``, on one node or on two nodes on loopback), from
``tests/distributed_utils.py``.

``run_cli`` runs the command line in the test's own process (its entry point ``rightreasons.apps.cli.main``) and
answers like ``subprocess.run``: a fresh interpreter costs several seconds of start-up (torch's import) per call, which
a test pays only when it needs a process of its own — a signal, a resource limit, ``torchrun``, a closed pipe, the
``python -m rightreasons`` entry itself.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import distributed_utils
from rightreasons.apps.cli import main as cli_main
from rightreasons.console import LOGGER_NAME
from rightreasons.models.resnet import BasicBlock, BcosResNet

torch.set_num_threads(1)
os.environ["OMP_NUM_THREADS"] = "1"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


class TinyCNN(nn.Module):
    """A four-stage conv net with named stages; ``xdnn=True`` drops biases and norms (an X-DNN: bias-free ReLU)."""

    def __init__(self, num_classes: int = 5, width: int = 4, xdnn: bool = False) -> None:
        super().__init__()
        self.is_xdnn = xdnn

        def stage(cin: int, cout: int, stride: int) -> nn.Sequential:
            layers = [nn.Conv2d(cin, cout, 3, stride, 1, bias=not xdnn)]
            return nn.Sequential(*layers, *([] if xdnn else [nn.BatchNorm2d(cout)]), nn.ReLU())

        self.stem = stage(3, width, 1)
        self.stage1 = stage(width, width, 1)
        self.stage2 = stage(width, 2 * width, 2)
        self.stage3 = stage(2 * width, 4 * width, 2)
        self.stage4 = stage(4 * width, 4 * width, 1)
        self.fc = nn.Linear(4 * width, num_classes, bias=not xdnn)

    stage_names = {"mid1": "stage1", "mid2": "stage2", "mid3": "stage3", "final": "stage4"}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stage4(self.stage3(self.stage2(self.stage1(self.stem(x)))))
        return self.fc(x.mean((2, 3)))


def _tiny_bcos_resnet(num_classes: int = 5) -> BcosResNet:
    """A three-stage B-cos ResNet of width 4 for 6-channel 16 px inputs (mid1–mid3 at 16, 8, 4 px; final = mid3)."""
    return BcosResNet(BasicBlock, [1, 1, 1], num_classes=num_classes, inplanes=4, small_inputs=True)


def _bcos_input(n: int = 4, size: int = 16, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random images in the six-channel B-cos encoding ``[rgb, 1 − rgb]``."""
    rgb = torch.rand(n, 3, size, size, dtype=dtype)
    return torch.cat([rgb, 1 - rgb], 1)


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """TorchDynamo's caches emptied before and after the test (``pytestmark = pytest.mark.usefixtures(...)`` in the
    modules that compile): a compiled graph or a recompilation limit never carries over from one test to the next."""
    import torch._dynamo

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def tiny_cnn() -> type[TinyCNN]:
    """``tiny_cnn(num_classes=5, width=4, xdnn=False)``: a four-stage conv net for 3-channel inputs with named stages
    (``mid1``–``mid3``, ``final``); ``xdnn=True`` drops biases and norms and sets ``is_xdnn``."""
    return TinyCNN


@pytest.fixture
def tiny_bcos_resnet() -> Callable[..., BcosResNet]:
    """``tiny_bcos_resnet(num_classes=5)``: a three-stage B-cos ResNet of width 4 for 6-channel 16 px inputs."""
    return _tiny_bcos_resnet


@pytest.fixture
def bcos_input() -> Callable[..., torch.Tensor]:
    """``bcos_input(n=4, size=16, dtype=torch.float32)``: random six-channel B-cos encoded images."""
    return _bcos_input


# ---------------------------------------------------------------------------------------------- dataset layouts
def _voc_xml(image_id: str, h: int, w: int, objects: list[tuple]) -> str:
    """A VOC 2007 annotation file as the release writes it; ``objects``: ``(name, xmin, ymin, xmax, ymax, difficult[,
    truncated])`` in VOC's 1-based inclusive pixels (``truncated`` 0 when left out)."""
    objs = "".join(
        f"<object><name>{n}</name><pose>Unspecified</pose><truncated>{(rest or [0])[0]}</truncated>"
        f"<difficult>{d}</difficult><bndbox><xmin>{x1}</xmin><ymin>{y1}</ymin><xmax>{x2}</xmax><ymax>{y2}</ymax>"
        "</bndbox></object>"
        for n, x1, y1, x2, y2, d, *rest in objects)
    return (f"<annotation><folder>VOC2007</folder><filename>{image_id}.jpg</filename>"
            "<source><database>The VOC2007 Database</database></source>"
            f"<size><width>{w}</width><height>{h}</height><depth>3</depth></size><segmented>0</segmented>{objs}"
            "</annotation>")


def _write_voc(root: Path, objects: dict[str, tuple], splits: dict[str, list[str]],
               segmentations: dict[str, np.ndarray] | None = None) -> Path:
    """``root/VOCdevkit/VOC2007``: random JPEGs and XML annotations of ``objects`` (``id → (H, W, objects)``), the
    image sets ``splits`` (``ImageSets/Main/<split>.txt``) and class-index PNGs ``segmentations`` (``id → [H, W]``
    uint8); returns the VOC2007 folder."""
    voc = root / "VOCdevkit" / "VOC2007"
    for d in ("JPEGImages", "Annotations", "ImageSets/Main", "SegmentationClass"):
        (voc / d).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for image_id, (h, w, objs) in objects.items():
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(voc / "JPEGImages" / f"{image_id}.jpg")
        (voc / "Annotations" / f"{image_id}.xml").write_text(_voc_xml(image_id, h, w, objs))
    for image_id, seg in (segmentations or {}).items():
        img = Image.fromarray(seg, mode="P")
        img.putpalette([0, 0, 0] * 256)
        img.save(voc / "SegmentationClass" / f"{image_id}.png")
    for split, ids in splits.items():
        (voc / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"{i}\n" for i in ids))
    return voc


def _write_coco(root: Path, categories: list[dict], images: list[dict], annotations: list[dict],
                split: str = "val", text: str | None = None) -> Path:
    """``root/annotations/instances_<split>2014.json`` (or ``text`` verbatim) with the release's top-level keys,
    and grey JPEGs of ``images`` in ``root/<split>2014/``; returns ``root``."""
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / f"{split}2014").mkdir(exist_ok=True)
    for img in images:
        pixels = np.full((img["height"], img["width"], 3), 128, np.uint8)
        Image.fromarray(pixels).save(root / f"{split}2014" / img["file_name"])
    content = {"info": {"description": "COCO 2014 Dataset", "year": 2014}, "licenses": [], "images": images,
               "annotations": annotations, "categories": categories}
    (root / "annotations" / f"instances_{split}2014.json").write_text(
        text if text is not None else json.dumps(content))
    return root


WATERBIRDS_HEADER = ("img_id", "img_filename", "y", "split", "place", "place_filename")
"""The columns of the release's ``metadata.csv``."""


def _write_waterbirds(root: Path, rows: list[tuple], header: tuple[str, ...] = WATERBIRDS_HEADER,
                      box_file: bool = True, segmentations: Path | None = None) -> Path:
    """Waterbirds-100 under ``root`` from ``rows`` ``(img_filename, y, place, split, bird box XYXY)``:
    ``metadata.csv`` (``header``), random 24 × 32 images, ``boxes.csv`` (unless ``box_file`` is false) and, into
    ``segmentations``, CUB-style bird masks ``<img_filename>.png`` (half the image size, 255 on the box); returns
    ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / "metadata.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for i, (name, y, place, split, _) in enumerate(rows):
            w.writerow([i + 1, name, y, split, place, "/b/bamboo_forest/00000001.jpg"][:len(header)])
    if box_file:
        with (root / "boxes.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["img_filename", "x1", "y1", "x2", "y2"])
            w.writerows([name, *box] for name, *_, box in rows)
    rng = np.random.default_rng(0)
    for name, *_, (x1, y1, x2, y2) in rows:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)).save(root / name)
        if segmentations is not None:
            mask = np.zeros((12, 16), np.uint8)
            mask[y1 // 2:(y2 + 1) // 2, x1 // 2:(x2 + 1) // 2] = 255
            (segmentations / name).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(mask).save((segmentations / name).with_suffix(".png"))
    return root


@pytest.fixture
def voc_xml() -> Callable[..., str]:
    """``voc_xml(image_id, h, w, objects)``: the text of a VOC annotation file."""
    return _voc_xml


@pytest.fixture
def write_voc() -> Callable[..., Path]:
    """``write_voc(root, objects, splits, segmentations=None)``: a VOCdevkit under ``root``; returns VOC2007."""
    return _write_voc


@pytest.fixture
def write_coco() -> Callable[..., Path]:
    """``write_coco(root, categories, images, annotations, split="val", text=None)``: a COCO 2014 split."""
    return _write_coco


@pytest.fixture
def write_waterbirds() -> Callable[..., Path]:
    """``write_waterbirds(root, rows, header=WATERBIRDS_HEADER, box_file=True, segmentations=None)``: Waterbirds-100
    under ``root``."""
    return _write_waterbirds


# ---------------------------------------------------------------------------------------------- several processes
@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """``free_port()``: a TCP port on 127.0.0.1 that is free now (for a test's own process group)."""
    return distributed_utils.free_port


@pytest.fixture(scope="session")
def gloo_processes() -> Callable[..., list]:
    """``gloo_processes(target, *args, world_size=2)``: ``target(rank, *args)`` (a module-level function of the test
    module) on ``world_size`` CPU processes forming one gloo group, rank 0 in the test process; what each returned,
    in rank order (``tests/distributed_utils.py``)."""
    return distributed_utils.gloo_processes


@pytest.fixture(scope="session")
def launch() -> Callable[..., list[subprocess.CompletedProcess]]:
    """``launch(args, processes=1, nodes=1, node_args=(), cwd=None, timeout=GUARD_S, check=True)``: ``python -m
    rightreasons ARGS`` as one distributed job on CPU — ``processes`` processes on one node (``torchrun
    --standalone``) or ``nodes`` nodes of one process each, meeting at a c10d rendezvous on 127.0.0.1 (two launcher
    processes on this machine); ``node_args[i]`` are appended to node ``i``'s command
    (``tests/distributed_utils.py``)."""
    return distributed_utils.launch


# ---------------------------------------------------------------------------------------------- the command line
def _run_cli(*args: object, cwd: Path | str | None = None) -> subprocess.CompletedProcess:
    argv = [str(a) for a in args]
    directory, environment = os.getcwd(), dict(os.environ)
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    level = logging.getLogger(LOGGER_NAME).level
    out, err = io.StringIO(), io.StringIO()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            logging.captureWarnings(False)  # the command's configure_logging sends warnings to stderr, as in a process
            try:
                code = cli_main(argv)
            except SystemExit as e:  # argparse's usage errors and --help
                code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        sys.stderr.write(err.getvalue())  # into the test's report, above the bug's traceback
        raise
    finally:
        os.chdir(directory)
        os.environ.clear()
        os.environ.update(environment)
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        logging.getLogger(LOGGER_NAME).setLevel(level)
    return subprocess.CompletedProcess(["rightreasons", *argv], code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def run_cli() -> Callable[..., subprocess.CompletedProcess]:
    """``run_cli(*args, cwd=None)``: ``rightreasons ARGS`` (run in ``cwd``) through ``rightreasons.apps.cli.main`` in
    this process, as a ``subprocess.CompletedProcess`` with the exit code (argparse's ``SystemExit`` included) and what
    the command printed to stdout and stderr. As for a process of its own, what a command changes of the process —
    the working directory, environment variables (``--threads``), torch's thread count and deterministic mode, the
    level of the package's logger (``--verbose``), the warnings machinery — is put back after each call; warnings
    reach its stderr, as they would a process's. A bug's exception is raised (after what the command printed to
    stderr), not turned into a traceback on stderr."""
    return _run_cli
