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

# --- CNN families: DenseNet, VGG, ConvNeXt (B-cos v2 release architectures) ---
from .convnext import CONVNEXT_SIZES, BcosConvNeXt  # noqa: E402
from .densenet import BcosDenseNet, cifar_block_config  # noqa: E402
from .vgg import VGG_CONFIGS, BcosVGG  # noqa: E402

__all__ += ["BcosConvNeXt", "BcosDenseNet", "BcosVGG"]

_DENSENETS = {  # growth rate, dense layers per block, stem width
    "densenet121": (32, (6, 12, 24, 16), 64),
    "densenet161": (48, (6, 12, 36, 24), 96),
    "densenet169": (32, (6, 12, 32, 32), 64),
    "densenet201": (32, (6, 12, 48, 32), 64),
}
for _name, (_growth, _blocks, _init) in _DENSENETS.items():
    register_model(f"bcos_{_name}", BcosDenseNet, family="densenet", growth_rate=_growth, block_config=_blocks,
                   num_init_features=_init)

for _depth, _growth in ((52, 12), (100, 12), (190, 40), (250, 24)):
    register_model(f"bcos_cifar10_densenet{_depth}", BcosDenseNet, family="densenet", growth_rate=_growth,
                   block_config=cifar_block_config(_depth), num_init_features=2 * _growth, num_classes=10,
                   small_inputs=True)

for _name, _cfg in VGG_CONFIGS.items():
    register_model(f"bcos_{_name}", partial(BcosVGG, _cfg), family="vgg", norm_layer="none")
    register_model(f"bcos_{_name}_bnu", partial(BcosVGG, _cfg), family="vgg", norm_layer="bnu")

for _size, (_depths, _dims, _drop) in CONVNEXT_SIZES.items():
    register_model(f"bcos_convnext_{_size}", partial(BcosConvNeXt, _depths, _dims), family="convnext",
                   norm_layer="pn", stochastic_depth_prob=_drop)
    register_model(f"bcos_convnext_{_size}_bnu", partial(BcosConvNeXt, _depths, _dims), family="convnext",
                   norm_layer="bnu", stochastic_depth_prob=_drop)

# --- B-cos ViTs of the release (simple ViT, ViT-c) and holistic B-cos ViTs ---
from .holistic_vit import BcosHolisticViT  # noqa: E402
from .vit import RELEASE_VITS, SIMPLE_VIT_SIZES, BcosSimpleViT  # noqa: E402

__all__ += ["BcosHolisticViT", "BcosSimpleViT"]

for _name, _args in RELEASE_VITS.items():  # the standard twins are registered in rightreasons.standard
    register_model(f"bcos_{_name}", BcosSimpleViT, family="vit", **_args)

_DENSENET121_CUTS = {13: ("features.denseblock1", 4), 38: ("features.denseblock2", 2), 87: ("features.denseblock3", 1)}
"""Conv layers of DenseNet-121 → (submodule after them, tokeniser patch size giving 14×14 tokens at 224 px)."""
for _size in ("ti", "s", "b"):
    register_model(f"bcos_holistic_vit_{_size}", BcosHolisticViT, family="holistic_vit", image_size=224,
                   patch_size=16, **SIMPLE_VIT_SIZES[_size])
    for _layers, (_cut, _patch) in _DENSENET121_CUTS.items():
        register_model(f"bcos_holistic_vit_{_size}_densenet121_l{_layers}", BcosHolisticViT, family="holistic_vit",
                       image_size=224, patch_size=_patch, backbone="bcos_densenet121", backbone_cut=_cut,
                       **SIMPLE_VIT_SIZES[_size])
