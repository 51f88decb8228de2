"""Tokenisers for B-cos transformers: a B-cos CNN cut at a chosen depth, then a patchifying B-cos conv.

The holistic B-cos ViT (Holistically Explainable ViTs, §3.2 and app. A) tokenises an image with the features of a
B-cos CNN at some depth (DenseNet-121 after 13, 38 or 87 conv layers = the outputs of ``features.denseblock1/2/3``),
followed by one B-cos conv with kernel = stride = ``patch_size`` and MaxOut, so the number of tokens is the same for
every depth. Because the CNN is B-cos too, the whole tokeniser stays dynamic linear.

:func:`truncate_cnn` cuts *any* CNN after any of its submodules with torchvision's FX feature extraction: the traced
graph keeps exactly the operations needed for that submodule's output (the rest of the network and its parameters are
dropped), parameter names stay those of the full CNN, and dynamic-linear layers are kept as leaf modules so that
explanation mode reaches them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torchvision.models.feature_extraction import create_feature_extractor

from ..bcos.dynamic import DynamicLinear
from ..bcos.layers import BcosConv2d
from ..encoding import check_input_channels
from ..errors import CheckpointError
from .registry import get_model_spec

__all__ = ["ConvTokeniser", "feature_shape", "truncate_cnn"]

_FEATURES = "features"
_MODES = "_backbone_training_modes"


def truncate_cnn(model: nn.Module, cut: str) -> nn.Module:
    """The part of ``model``'s forward that computes the output of its submodule ``cut`` (e.g. ``"layer2"``,
    ``"features.denseblock3"``).

    Returns an FX graph module ``[N, C, H, W] -> {"features": [N, C', H', W']}`` holding only the submodules it uses,
    under their original names. Input-channel checks of the CNN's forward are not part of the graph (the caller checks).
    """
    names = [name for name, _ in model.named_modules() if name]
    if cut not in names:
        children = [name for name, _ in model.named_children()]
        raise ValueError(f"cannot cut {type(model).__name__} at {cut!r}: no such submodule; "
                         f"its top-level modules are {children} (use dotted paths for nested ones)")
    return create_feature_extractor(model, return_nodes={cut: _FEATURES},
                                    tracer_kwargs={"leaf_modules": [DynamicLinear],
                                                   "autowrap_functions": [check_input_channels]})


def feature_shape(module: nn.Module, in_chans: int, image_size: int) -> tuple[int, int, int]:
    """``(C, H', W')`` that ``module`` outputs for a ``[1, in_chans, image_size, image_size]`` image.

    Computed on the meta device (no arithmetic, no change to running statistics); ``module`` may return a tensor or
    the ``{"features": tensor}`` dict of :func:`truncate_cnn`.
    """
    state = {name: t.to("meta") for name, t in [*module.named_parameters(), *module.named_buffers()]}
    with torch.no_grad():
        out = torch.func.functional_call(module, state, (torch.empty(1, in_chans, image_size, image_size,
                                                                     device="meta"),))
    out = out[_FEATURES] if isinstance(out, dict) else out
    if out.dim() != 4:
        raise ValueError(f"expected a feature map [N, C, H, W] from {type(module).__name__}, "
                         f"got shape {tuple(out.shape)}")
    return tuple(out.shape[1:])


class ConvTokeniser(nn.Module):
    """``[N, in_chans, image_size, image_size] -> tokens [N, T, dim]``.

    An optional B-cos CNN (``backbone``, a registered model name, cut after its submodule ``backbone_cut``), then a
    B-cos conv ``proj`` with kernel = stride = ``patch_size`` and MaxOut, flattened row-major into ``T = grid_size²``
    tokens. Without a backbone ``proj`` patchifies the image itself.

    Args:
        in_chans, image_size: the input the tokeniser is built for.
        dim: token width.
        patch_size: kernel and stride of ``proj`` on the backbone's feature map (or the image).
        b, max_out: B-cos settings of ``proj``.
        backbone: registry name of a B-cos CNN (e.g. ``"bcos_densenet121"``), or ``None``.
        backbone_cut: dotted name of the backbone submodule whose output is tokenised (e.g. ``"features.denseblock3"``).
        backbone_kwargs: constructor arguments of the backbone (e.g. ``{"norm_layer": "bnu"}``).
    """

    def __init__(self, in_chans: int, image_size: int, dim: int, patch_size: int, b: float = 2, max_out: int = 2,
                 backbone: str | None = None, backbone_cut: str | None = None,
                 backbone_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        if (backbone is None) != (backbone_cut is None):
            raise ValueError(f"give backbone and backbone_cut together, got backbone={backbone!r}, "
                             f"backbone_cut={backbone_cut!r}")
        self.backbone_name = backbone
        self.backbone_kwargs = dict(backbone_kwargs or {})
        self.backbone = None if backbone is None else truncate_cnn(self._full_backbone(in_chans), backbone_cut)
        channels, height, width = (in_chans, image_size, image_size) if self.backbone is None else \
            feature_shape(self.backbone, in_chans, image_size)
        if height % patch_size or width % patch_size:
            where = "the image" if self.backbone is None else f"the {backbone} features after {backbone_cut!r}"
            raise ValueError(f"{where} ({height}×{width} for {image_size}×{image_size} images) must be a multiple of "
                             f"patch_size={patch_size}")
        self.grid_size = (height // patch_size, width // patch_size)
        self.num_tokens = self.grid_size[0] * self.grid_size[1]
        self.stride = image_size // self.grid_size[0]
        self.proj = BcosConv2d(channels, dim, kernel_size=patch_size, stride=patch_size, b=b, max_out=max_out)

    def _full_backbone(self, in_chans: int) -> nn.Module:
        cnn = get_model_spec(self.backbone_name).build(**self.backbone_kwargs)
        if getattr(cnn, "in_chans", in_chans) != in_chans:
            raise ValueError(f"backbone {self.backbone_name} takes {cnn.in_chans} input channels, the tokeniser "
                             f"{in_chans}")
        return cnn

    def load_backbone_state(self, state: Mapping[str, Tensor]) -> None:
        """Copy the weights of the *full* backbone CNN into the cut one, e.g. from released weights::

            cnn = create_model("bcos_densenet121", pretrained=True)
            vit.tokeniser.load_backbone_state(cnn.state_dict())

        Every parameter and buffer the cut backbone keeps must be in ``state`` with its shape (the rest of ``state``,
        the layers after the cut, is ignored); otherwise :class:`~rightreasons.errors.CheckpointError` lists them.
        """
        if self.backbone is None:
            raise ValueError("this tokeniser has no backbone to load weights into")
        own = self.backbone.state_dict()
        bad = [k for k, v in own.items() if k not in state or tuple(state[k].shape) != tuple(v.shape)]
        if bad:
            raise CheckpointError(f"the state of {self.backbone_name} lacks or mis-shapes {len(bad)} entries the cut "
                                  f"backbone needs: {bad[:8]}")
        self.backbone.load_state_dict({k: state[k] for k in own})

    def __getstate__(self) -> dict[str, Any]:
        """Record the train/eval mode of every backbone module with the state (deepcopy, pickling).

        torchvision's ``DualGraphModule`` re-initialises itself in train mode when it is copied, which would silently
        switch an evaluated (or frozen, eval-mode) backbone to batch statistics; :meth:`__setstate__` restores the
        modes.
        """
        state = self.__dict__.copy()
        if self.backbone is not None:
            state[_MODES] = {name: m.training for name, m in self.backbone.named_modules()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        modes = state.pop(_MODES, None)
        super().__setstate__(state)
        if modes is not None:
            self.backbone.train(modes[""])  # switches the graph module between its train and eval graphs
            for name, m in self.backbone.named_modules():
                m.training = modes[name]

    def forward(self, x: Tensor) -> Tensor:
        if self.backbone is not None:
            x = self.backbone(x)[_FEATURES]
        return self.proj(x).flatten(2).transpose(1, 2)
