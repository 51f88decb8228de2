"""The B-cosified model classes: a converted torchvision ResNet or DenseNet, the release's Simple ViT / ViT-c and a
timm ``VisionTransformer``. Each takes over the modules of a (copied) standard model, converting them with
:mod:`.layers`; build them with :func:`~rightreasons.models.bcosify.bcosify` or ``create_model("bcosified_<name>")``."""

from __future__ import annotations

import torch.nn.functional as F
from timm.layers import LayerScale  # noqa: F401
from timm.models.vision_transformer import Block as TimmBlock
from timm.models.vision_transformer import VisionTransformer
from torch import Tensor, nn
from torchvision.models import densenet as tv_densenet
from torchvision.models import resnet as tv_resnet

from ...bcos.layers import BcosConv2d, BcosLinear, LogitLayer
from ...encoding import check_input_channels
from ...errors import UsageError
from ..base import BcosCNN
from ..densenet import DENSENET_STAGES
from ..resnet import RESNET_STAGES
from ..vit import SimpleViT
from .layers import (BcosifyOptions, avgpool_like, convert_classifier, convert_conv, convert_linear,
                     convert_tree)

__all__ = ["BcosifiedDenseNet", "BcosifiedModel", "BcosifiedResNet", "BcosifiedSimpleViT", "BcosifiedTimmViT"]


class BcosifiedModel:
    """Mixin of every B-cosified model: the :class:`BcosifyOptions` it was converted with (``options``) and the
    B-cos units whose exponent :func:`set_b` changes."""

    options: BcosifyOptions

    def bcos_units(self) -> list[nn.Module]:
        """Every B-cos conv and linear unit of the model."""
        return [m for m in self.modules() if isinstance(m, (BcosConv2d, BcosLinear))]  # type: ignore[attr-defined]


class BcosifiedResNet(BcosifiedModel, BcosCNN):
    """A B-cosified torchvision ResNet: ``[N, 6, H, W] -> logits [N, num_classes]``, torchvision's module names
    (``conv1``, ``bn1``, ``maxpool`` — an average pool by default —, ``layer1``–``layer4``, ``fc`` as a 1×1 conv).

    Built from a (copied) standard ResNet whose modules it takes over; use :func:`bcosify` or
    ``create_model("bcosified_resnet18", ...)``.
    """

    classifier_name = "fc"

    def __init__(self, source: tv_resnet.ResNet, options: BcosifyOptions) -> None:
        num_classes = source.fc.out_features
        super().__init__(num_classes, 6, options.b, 1, options.logit_bias_for(num_classes), None)
        self.options = options
        self.conv1 = convert_conv(source.conv1, options, "conv1", fold=True)
        self.bn1 = convert_tree(source.bn1, options, "bn1")
        self.relu = nn.ReLU()
        self.maxpool = avgpool_like(source.maxpool, options)
        for name in RESNET_STAGES.values():
            setattr(self, name, convert_tree(getattr(source, name), options, name))
        self.fc = convert_classifier(source.fc, options)
        self.num_features = source.fc.in_features

    @property
    def stage_names(self) -> dict[str, str]:
        """Guidance layer names → module paths: ``mid1``–``mid3`` after stages 1–3, ``final`` after stage 4."""
        return dict(RESNET_STAGES)

    def forward_features(self, x: Tensor) -> Tensor:
        """``[N, 6, H, W] -> [N, num_features, H/32, W/32]``."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


class BcosifiedDenseNet(BcosifiedModel, BcosCNN):
    """A B-cosified torchvision DenseNet: ``[N, 6, H, W] -> logits [N, num_classes]``, torchvision's module names
    (``features.conv0`` … ``features.norm5``, ``classifier`` as a 1×1 conv). Dense layers never checkpoint
    (``memory_efficient`` is switched off: recomputation would break double backward)."""

    def __init__(self, source: tv_densenet.DenseNet, options: BcosifyOptions) -> None:
        num_classes = source.classifier.out_features
        super().__init__(num_classes, 6, options.b, 1, options.logit_bias_for(num_classes), None)
        self.options = options
        features = source.features
        features.conv0 = convert_conv(features.conv0, options, "features.conv0", fold=True)
        features.pool0 = avgpool_like(features.pool0, options)
        for layer in features.modules():
            if isinstance(layer, tv_densenet._DenseLayer):
                layer.memory_efficient = False
        self.features = convert_tree(features, options, "features")
        self.classifier = convert_classifier(source.classifier, options)
        self.num_features = source.classifier.in_features

    @property
    def stage_names(self) -> dict[str, str]:
        """Guidance layer names → module paths: dense blocks 1–3 and ``features.norm5``."""
        return dict(DENSENET_STAGES)

    def forward_features(self, x: Tensor) -> Tensor:
        """``[N, 6, H, W] -> [N, num_features, H/32, W/32]`` (after the final ReLU, as torchvision)."""
        return F.relu(self.features(x))


class BcosifiedSimpleViT(BcosifiedModel, SimpleViT):
    """A B-cosified standard Simple ViT / ViT-c of the B-cos release: ``[N, 6, image_size, image_size] -> logits``,
    the release's module names. Affine: the additive positional embedding is not part of the contributions.

    It takes over the converted parts of a (copied) :class:`~rightreasons.models.standard.StandardSimpleViT`, so
    ``SimpleViT.__init__`` (which builds parts from a layer kit) does not run.
    """

    is_affine = True
    """The additive positional embedding is a constant term: ``logit − logit_bias ≠ Σ W(x) ⊙ x`` in general."""

    def __init__(self, source: SimpleViT, options: BcosifyOptions) -> None:
        nn.Module.__init__(self)
        self.options = options
        self.num_classes, self.in_chans, self.num_features = source.num_classes, 6, source.num_features
        self.image_size, self.grid_size = source.image_size, source.grid_size
        embedding = source.to_patch_embedding
        if embedding.conv_stem is not None:
            embedding.conv_stem[0] = convert_conv(embedding.conv_stem[0], options, "to_patch_embedding.conv_stem.0",
                                           fold=True)
        else:
            embedding.linear = convert_linear(embedding.linear, options, "to_patch_embedding.linear", patch_fold=True)
        self.to_patch_embedding = convert_tree(embedding, options, "to_patch_embedding")
        self.register_buffer("pos_embedding", source.pos_embedding, persistent=False)
        self.transformer = convert_tree(source.transformer, options, "transformer")
        self.linear_head = convert_tree(source.linear_head, options, "linear_head")
        self.logit_layer = LogitLayer(options.logit_bias_for(self.num_classes))


class BcosifiedTimmViT(BcosifiedModel, nn.Module):
    """A B-cosified timm ``VisionTransformer`` (the converted model as ``vit``, then the fixed logit layer):
    ``[N, 6, H, W] -> logits [N, num_classes]``, timm's interface. Affine: the learnt positional embedding and the
    class token are constant terms."""

    is_affine = True

    def __init__(self, source: VisionTransformer, options: BcosifyOptions) -> None:
        super().__init__()
        self.options = options
        checks = (("attention pooling", source.attn_pool is not None),
                  (f"global_pool={source.global_pool!r}", source.global_pool not in ("token", "avg")),
                  ("no classifier (num_classes=0)", not isinstance(source.head, nn.Linear)))
        problems = [problem for problem, bad in checks if bad]
        problems += [f"block {i} of type {type(b).__qualname__}" for i, b in enumerate(source.blocks)
                     if type(b) is not TimmBlock]
        if problems:
            raise UsageError(f"bcosify: this timm VisionTransformer cannot be B-cosified: {', '.join(problems)} "
                             "(supported: standard blocks, token or average pooling, a linear head)")
        source.patch_embed.proj = convert_conv(source.patch_embed.proj, options, "patch_embed.proj", fold=True)
        for name, child in list(source.named_children()):
            setattr(source, name, convert_tree(child, options, name))
        self.vit = source
        self.logit_layer = LogitLayer(options.logit_bias_for(source.num_classes))
        self.num_classes, self.in_chans, self.num_features = source.num_classes, 6, source.num_features

    def get_classifier(self) -> nn.Module:
        return self.vit.head

    def forward_features(self, x: Tensor) -> Tensor:
        """``[N, 6, H, W] -> tokens [N, T, dim]``."""
        check_input_channels(x, self.in_chans, type(self).__name__)
        return self.vit.forward_features(x)

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """Tokens → logits ``[N, num_classes]`` (pooled tokens ``[N, dim]`` with ``pre_logits``)."""
        x = self.vit.forward_head(x, pre_logits=pre_logits)
        return x if pre_logits else self.logit_layer(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))

