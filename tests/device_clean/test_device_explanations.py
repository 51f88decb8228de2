"""Every attribution method at every layer, every localisation loss and every evaluator run on the device of the tier
(``conftest.py``): differentiable explanations forward and backward (a second-order backward into the parameters),
losses forward and backward, evaluators over a batch as the evaluation loop moves it — with no tensor left on the
CPU and no host read."""

from __future__ import annotations

import pytest
import torch
from torchvision.models import resnet18

from conftest import no_host_reads
from rightreasons import create_model
from rightreasons.data import collate, eval_transform, load_dataset
from rightreasons.distill.fidelity import FidelityEvaluator
from rightreasons.explain import GUIDANCE_LAYERS, METHOD_NAMES, attribute
from rightreasons.guidance.losses import LOSSES, REDUCTIONS
from rightreasons.metrics.evaluation import ClassificationEvaluator, LocalizationEvaluator, _to_device

SIZE = 32


def bcos_model(device: torch.device, train: bool = True) -> torch.nn.Module:
    with torch.device(device):
        return create_model("bcos_resnet18", num_classes=5, inplanes=8).train(train)


@pytest.mark.parametrize("layer", GUIDANCE_LAYERS)
@pytest.mark.parametrize("method", METHOD_NAMES)
def test_every_method_at_every_layer_explains_and_backpropagates(device, method, layer):
    if method == "bcos_weights" and layer != "input":
        pytest.skip("bcos_weights is defined at the input only")
    model = bcos_model(device, train=method != "intgrad")  # IntGrad's Riemann sum needs eval mode
    x = torch.rand(2, 6, SIZE, SIZE, device=device)
    target = torch.tensor([1, 3]).to(device)
    with no_host_reads(device):
        result = attribute(model, x, target, method, layer, create_graph=True, steps=3)
        (result.explanation.square().mean() + result.logits.sum()).backward()
    assert result.maps.device.type == device.type and result.maps.shape == (2, SIZE, SIZE)
    assert all(p.grad is not None and p.grad.device.type == device.type for p in model.parameters())


@pytest.mark.parametrize("method", ["ixg", "gradcam", "intgrad"])
def test_a_standard_network_explains_and_backpropagates(device, method):
    with torch.device(device):
        model = resnet18(num_classes=5).train(method != "intgrad")
    x = torch.rand(2, 3, SIZE, SIZE, device=device)
    with no_host_reads(device):
        result = attribute(model, x, None, method, "final", create_graph=True, steps=3)
        result.maps.sum().backward()
    assert model.conv1.weight.grad.device.type == device.type


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_every_localisation_loss_runs_forward_and_backward(device, loss, reduction):
    maps = torch.randn(3, SIZE, SIZE, device=device, requires_grad=True)
    masks = torch.zeros(3, SIZE, SIZE, dtype=torch.bool, device=device)
    masks[0, 4:20, 8:24] = True  # image 1 empty, image 2 full
    masks[2] = True
    with no_host_reads(device):
        value = LOSSES[loss](maps, masks, reduction)
        value.sum().backward()
    assert value.device.type == device.type and maps.grad.device.type == device.type


def evaluation_batch(name: str, device: torch.device) -> dict:
    """Four samples of a synthetic dataset with boxes, collated and moved as the evaluation loop moves them."""
    dataset = load_dataset(name, None, "val", n=8, size=SIZE,
                           transform=eval_transform(SIZE, encoding="bcos", crop_fraction=1.0))
    return _to_device(collate([dataset[i] for i in range(4)]), device)


@pytest.mark.parametrize("name", ["synthetic-birds", "synthetic-multilabel"])
def test_the_evaluators_score_a_batch_on_the_device(device, name):
    batch = evaluation_batch(name, device)
    classes = batch["labels"].shape[1]
    with torch.device(device):
        model = create_model("bcos_resnet18", num_classes=classes, inplanes=8).eval()
        teacher = create_model("bcos_resnet18", num_classes=classes, inplanes=8).eval()
    multilabel = name == "synthetic-multilabel"
    groups = None if multilabel else ["landbird/land", "landbird/water", "waterbird/land", "waterbird/water"]
    evaluators = [ClassificationEvaluator(classes, multilabel, groups), LocalizationEvaluator("bcos", "input"),
                  FidelityEvaluator(teacher, method="bcos_weights", layer="input", group_names=groups,
                                    multilabel=multilabel)]
    with torch.no_grad(), no_host_reads(device):
        logits = model(batch["image"])
        for evaluator in evaluators:
            evaluator.update(model, batch, logits)
    if device.type != "meta":  # the results are read once, at the end
        results = {k: v for e in evaluators for k, v in e.compute().items()}
        assert {"score", "epg", "iou", "agreement"} <= results.keys()
