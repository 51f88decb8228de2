"""The B-cos model zoo; importing this package registers every architecture with :mod:`rightreasons.registry`."""

from functools import partial

from ...registry import register_model
from .resnet import BasicBlock, BcosResNet, Bottleneck

__all__ = ["BcosResNet"]

_RESNETS = {
    "resnet18": (BasicBlock, [2, 2, 2, 2], {}),
    "resnet34": (BasicBlock, [3, 4, 6, 3], {}),
    "resnet50": (Bottleneck, [3, 4, 6, 3], {}),
    "resnet101": (Bottleneck, [3, 4, 23, 3], {}),
    "resnet152": (Bottleneck, [3, 8, 36, 3], {}),
    "resnext50_32x4d": (Bottleneck, [3, 4, 6, 3], {"groups": 32, "width_per_group": 4}),
    "resnext101_32x8d": (Bottleneck, [3, 4, 23, 3], {"groups": 32, "width_per_group": 8}),
    "wide_resnet50_2": (Bottleneck, [3, 4, 6, 3], {"width_per_group": 128}),
    "wide_resnet101_2": (Bottleneck, [3, 4, 23, 3], {"width_per_group": 128}),
}
for _name, (_block, _layers, _extra) in _RESNETS.items():
    register_model(f"bcos_{_name}", partial(BcosResNet, _block, _layers), family="resnet", **_extra)

for _depth in (20, 32, 44, 56, 110):
    register_model(f"bcos_cifar10_resnet{_depth}", partial(BcosResNet, BasicBlock, [(_depth - 2) // 6] * 3),
                   family="resnet", num_classes=10, inplanes=16, small_inputs=True)
