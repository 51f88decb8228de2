"""Forwards on a fake ``cuda`` device (``torch._subclasses.FakeTensorMode``: shapes, dtypes and devices, no data, no
GPU needed): a model of every family, the classification loss and every localisation loss run with every tensor on
``cuda`` — a tensor made on the CPU inside (a factory without
``device=``) meets a CUDA tensor and fails, as it would on a GPU — and a read of a value fails as well."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functional_call

from rightreasons import create_model
from rightreasons.classification.loss import classification_loss
from rightreasons.guidance.losses import LOSSES

FAMILIES = {"bcos_resnet18": {"inplanes": 8}, "bcos_densenet121": {}, "bcos_vgg11_bnu": {},
            "bcos_convnext_atto": {}, "bcos_simple_vit_ti_patch16_224": {"image_size": 32, "patch_size": 8},
            "bcos_vitc_ti_patch1_14": {"image_size": 32}, "bcosified_resnet18": {}, "resnet18": {}}


@pytest.fixture
def fake_cuda():
    """Inside: tensors made with ``device="cuda"`` are fake CUDA tensors."""
    with FakeTensorMode() as mode, torch.device("cuda"):
        yield mode


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_model_of_every_family_runs_forward_on_cuda(name):
    """The model is built on the CPU, its weights given to it as fake CUDA tensors (``functional_call``)."""
    model = create_model(name, num_classes=5, **FAMILIES[name]).train()
    with FakeTensorMode() as mode, torch.device("cuda"):
        state = {k: mode.from_tensor(v).to("cuda")
                 for k, v in [*model.named_parameters(), *model.named_buffers()]}  # non-persistent buffers too
        x = torch.rand(2, 3 if name == "resnet18" else 6, 32, 32)
        logits = functional_call(model, state, (x,))
        loss = classification_loss(logits, torch.zeros(2, 5), "bce")
    assert logits.device.type == "cuda" and logits.shape == (2, 5) and loss.device.type == "cuda"


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_every_localisation_loss_runs_forward_on_cuda(fake_cuda, loss):
    maps = torch.rand(3, 16, 16)
    masks = torch.rand(3, 16, 16) > 0.5
    assert LOSSES[loss](maps, masks).device.type == "cuda"


def test_a_read_or_a_cpu_tensor_fails_on_the_fake_device(fake_cuda):
    """The tier is not blind: what it must catch fails."""
    x = torch.rand(3)
    with pytest.raises(Exception, match="_local_scalar_dense"):
        x.sum().item()
    with pytest.raises(Exception, match="device"):
        x + torch.ones(3, device="cpu")
