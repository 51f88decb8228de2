"""Shared test settings (deterministic seeds and one torch thread) and the tiny models several test packages use.

``make test`` runs two xdist workers on the two CI cores; with torch's default of one thread per core each worker
would oversubscribe the machine, and the tests' many small tensor operations are slower with intra-op threads anyway.

The tiny models (a named-stage conv net, optionally an X-DNN, and a three-stage B-cos ResNet) are exposed as factory
fixtures — ``tiny_cnn``, ``tiny_bcos_resnet`` and ``bcos_input`` — so that test modules never import each other.
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch
from torch import nn

from rightreasons.models.resnet import BasicBlock, BcosResNet

torch.set_num_threads(1)


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
