"""Activation checkpointing by stage (``model.activation_checkpointing``) changes memory, never results.

A guided step (float64, second order through the explanation at the input and at ``mid2``; the annotated subset with
shared batch statistics and the whole batch) has the same loss, parameter gradients and BatchNorm running statistics
with and without checkpointed stages; the stages are really recomputed; a hook that records outputs inside a stage
records each forward once; a compiled model checkpoints without a graph break; configs and models that cannot be
checkpointed are refused before any work.
"""

from __future__ import annotations

import copy
import pickle
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from rightreasons.classification import ClassificationConfig, ClassificationTask
from rightreasons.config import from_dict
from rightreasons.errors import ConfigError, UsageError
from rightreasons.explain import capture_outputs
from rightreasons.guidance import GuidanceObjective
from rightreasons.models import create_model
from rightreasons.models.checkpointing import checkpoint_stages, checkpointed_stages, recomputing
from rightreasons.models.resnet import BasicBlock, BcosResNet


def _model() -> BcosResNet:
    torch.manual_seed(0)
    return BcosResNet(BasicBlock, [1, 1, 1, 1], num_classes=5, inplanes=4).double().train()


def _batch(n: int = 4, size: int = 32):
    g = torch.Generator().manual_seed(1)
    rgb = torch.rand(n, 3, size, size, generator=g, dtype=torch.float64)
    labels = torch.zeros(n, 5, dtype=torch.float64)
    labels[:, 0] = 1
    labels[::2, 3] = 1
    boxes = [torch.tensor([[4.0, 4.0, 18.0, 20.0], [12.0, 10.0, 28.0, 30.0]]) for _ in range(n)]
    return torch.cat([rgb, 1 - rgb], 1), labels, boxes, [torch.tensor([0, 3]) for _ in range(n)]


def _guided_step(model: BcosResNet, layer: str, has_boxes: torch.Tensor):
    images, labels, boxes, box_labels = _batch()
    out = GuidanceObjective("bcos", layer, "energy")(model, images, labels, boxes, box_labels, has_boxes,
                                                     torch.Generator().manual_seed(0))
    loss = F.binary_cross_entropy_with_logits(out.logits, labels) + out.loss
    loss.backward()
    return loss.detach(), {k: p.grad for k, p in model.named_parameters()}, dict(model.named_buffers())


@pytest.mark.parametrize("layer", ["input", "mid2"])
@pytest.mark.parametrize("annotated", ["all", "some"])
def test_a_guided_step_is_the_same_with_checkpointed_stages(layer, annotated):
    has_boxes = torch.ones(4, dtype=torch.bool) if annotated == "all" else torch.tensor([True, False, True, False])
    plain, checkpointed = _model(), _model()
    assert checkpoint_stages(checkpointed) == ["layer1", "layer2", "layer3", "layer4"]
    recomputed = []
    checkpointed.layer2[0].conv1.register_forward_hook(lambda *_: recomputed.append(recomputing()))
    loss, grads, buffers = _guided_step(plain, layer, has_boxes)
    loss_c, grads_c, buffers_c = _guided_step(checkpointed, layer, has_boxes)
    assert any(recomputed) and not recomputed[0]  # the stage ran forward, then again in a backward
    torch.testing.assert_close(loss_c, loss, rtol=1e-12, atol=0)
    assert grads_c.keys() == grads.keys() and grads["conv1.linear.weight"].abs().max() > 0
    for name, grad in grads.items():
        torch.testing.assert_close(grads_c[name], grad, rtol=1e-10, atol=1e-14, msg=name)
    for name, buffer in buffers.items():  # running statistics updated once per step, as without checkpointing
        torch.testing.assert_close(buffers_c[name], buffer, rtol=1e-12, atol=0, msg=name)


def test_a_recorded_layer_inside_a_stage_is_recorded_once_per_forward():
    model = _model()
    checkpoint_stages(model, ["mid2"])
    images = _batch()[0]
    with capture_outputs(model, ["layer2.0.conv1"]) as captured:
        model(images).sum().backward()
    assert len(captured[0]) == 1


def test_torch_batchnorm_statistics_and_gradients_are_the_same(tiny_cnn):
    torch.manual_seed(0)
    plain = tiny_cnn().double().train()
    checkpointed = copy.deepcopy(plain)
    checkpoint_stages(checkpointed, ["mid1", "final"])
    x = torch.rand(4, 3, 16, 16, dtype=torch.float64)
    for model in (plain, checkpointed):
        model(x).square().sum().backward()
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-12, atol=0, msg=name)
    for (name, b), c in zip(plain.named_buffers(), checkpointed.buffers()):
        torch.testing.assert_close(c, b, rtol=1e-12, atol=0, msg=name)


def test_copies_and_pickles_of_a_model_keep_their_own_checkpointed_stages():
    model = _model()
    checkpoint_stages(model, ["mid1", "final"])
    for copied in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert checkpointed_stages(copied) == ["layer1", "layer4"] and copied.layer1.forward.stage is copied.layer1


def test_models_without_stages_to_checkpoint_are_refused():
    model = _model()
    with pytest.raises(UsageError, match=r"no stage 'mid4'.*\['mid1', 'mid2', 'mid3', 'final'\]"):
        checkpoint_stages(model, ["mid4"])
    with torch.device("meta"):
        vit = create_model("bcos_simple_vit_ti_patch16_224")
        vgg = create_model("bcos_vgg11")
    with pytest.raises(UsageError, match="declares no stages"):
        checkpoint_stages(vit)
    with pytest.raises(UsageError, match=r"'features.5' of bcos_vgg11 is a single layer \(AvgPool2d\)"):
        checkpoint_stages(vgg)
    assert checkpoint_stages(model, []) == [] and checkpointed_stages(model) == [] and checkpointed_stages(vgg) == []


def test_the_config_option_checkpoints_the_stages_and_refuses_bad_values_before_any_work():
    def config(**model):
        return from_dict(ClassificationConfig, {"model": {"name": "bcos_resnet18", "kwargs": {"inplanes": 4},
                                                          **model}})

    task = ClassificationTask(config(activation_checkpointing=["mid2", "final"]))
    model = task.build_model(SimpleNamespace(num_classes=3, positive_labels=torch.eye(3)))
    assert checkpointed_stages(model) == ["layer2", "layer4"]
    assert checkpointed_stages(ClassificationTask(config()).build_model(
        SimpleNamespace(num_classes=3, positive_labels=torch.eye(3)))) == []
    for bad in ([], ["mid2", "mid2"], ["input"], "yes"):
        with pytest.raises(ConfigError, match="activation_checkpointing"):
            config(activation_checkpointing=bad)
    with pytest.raises(ConfigError, match="model.activation_checkpointing: .* of bcos_vgg11 is a single layer"):
        ClassificationTask(from_dict(ClassificationConfig, {"model": {"name": "bcos_vgg11",
                                                                      "activation_checkpointing": True}}))


@pytest.mark.exhaustive  # about 10 s of compiling
def test_a_compiled_model_checkpoints_its_stages(tiny_bcos_resnet):
    torch.manual_seed(0)
    plain = tiny_bcos_resnet().double().train()
    checkpointed = copy.deepcopy(plain)
    checkpoint_stages(checkpointed, ["mid2"])
    images = _batch(n=2, size=8)[0]
    for model in (plain, torch.compile(checkpointed, backend="aot_eager", fullgraph=True)):  # no graph break
        model(images).square().sum().backward()
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-10, atol=1e-14, msg=name)
    for (name, b), c in zip(plain.named_buffers(), checkpointed.buffers()):  # updated once: by the forward graph
        torch.testing.assert_close(c, b, rtol=1e-12, atol=0, msg=name)
