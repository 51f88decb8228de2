"""``channels_last``: a B-cos ResNet in the channels-last memory format computes what it computes in the default one —
forward, B-cos explanations, a guided step's second-order gradients — and every layer keeps the format (nothing falls
back to a contiguous copy). On the CPU the comparison runs on torch's own convolution kernels: oneDNN's channels-last
backward of a strided 1x1 convolution with few input channels gives wrong weight gradients or hangs
(uxlfoundation/oneDNN#6035; the tiny ResNet's 4 → 8 downsampling was 70 % off), which is why the trainer refuses
``channels_last`` on the CPU."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from rightreasons.config import from_dict
from rightreasons.engine import Trainer
from rightreasons.errors import ConfigError
from rightreasons.explain import attribute
from rightreasons.guidance import GuidanceObjective, GuidanceTask, GuideConfig
from rightreasons.models.resnet import BasicBlock, BcosResNet

CL = torch.channels_last


def batch(n: int = 4, size: int = 32) -> tuple[torch.Tensor, torch.Tensor, list, list]:
    rgb = torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(5))
    labels = torch.zeros(n, 5)
    labels[:, 0] = 1
    boxes = [torch.tensor([[4.0, 4.0, 18.0, 20.0]])] * n
    return torch.cat([rgb, 1 - rgb], 1), labels, boxes, [torch.tensor([0])] * n


def guided_gradients(model: nn.Module, images: torch.Tensor, labels, boxes, box_labels, layer: str) -> list:
    out = GuidanceObjective(method="bcos", layer=layer, loss="energy")(
        model, images, labels, boxes, box_labels, torch.ones(len(images), dtype=torch.bool),
        torch.Generator().manual_seed(0))
    total = nn.functional.binary_cross_entropy_with_logits(out.logits, labels) + out.loss
    return torch.autograd.grad(total, list(model.parameters()))


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")  # torch.backends.mkldnn.flags
@pytest.mark.parametrize("layer", ["input", "final"])
def test_channels_last_bcos_resnet_equals_the_default_format(layer):
    images, labels, boxes, box_labels = batch()
    torch.manual_seed(0)
    model = BcosResNet(BasicBlock, [1, 1, 1], num_classes=5, inplanes=4, small_inputs=True).train()
    other = copy.deepcopy(model).to(memory_format=CL)
    last = images.contiguous(memory_format=CL)
    with torch.backends.mkldnn.flags(enabled=False):
        formats = {}
        hooks = [m.register_forward_hook(lambda _m, _i, out, name=name: formats.__setitem__(
            name, out.dim() != 4 or out.is_contiguous(memory_format=CL))) for name, m in other.named_modules() if name]
        torch.testing.assert_close(other(last), model(images))
        for hook in hooks:
            hook.remove()
        assert all(formats.values()), [name for name, kept in formats.items() if not kept]
        expected, got = attribute(model, images, 0, "bcos", layer), attribute(other, last, 0, "bcos", layer)
        torch.testing.assert_close(got.maps, expected.maps, rtol=1e-5, atol=1e-5 * expected.maps.abs().max().item())
        for a, b in zip(guided_gradients(model, images, labels, boxes, box_labels, layer),
                        guided_gradients(other, last, labels, boxes, box_labels, layer)):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5 * a.abs().max().item())


def test_channels_last_is_refused_on_the_cpu(tmp_path):
    config = from_dict(GuideConfig, {"output_dir": str(tmp_path / "run"), "cpu": True, "channels_last": True,
                                     "model": {"name": "bcos_cifar10_resnet20"}})
    with pytest.raises(ConfigError, match=r"channels_last: true is for GPUs: on the CPU, oneDNN computes wrong "
                                          r"weight gradients .*oneDNN#6035"):
        Trainer(GuidanceTask(config))
    assert not (tmp_path / "run").exists()
