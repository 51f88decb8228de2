"""B-cosified models in the rest of the library: model files, guidance and e²KD steps, the engine, and the B-ramp and
bias-decay helpers for fine-tuning."""

from __future__ import annotations

import math

import pytest
import timm
import torch
import torch.nn.functional as F
from torch import nn

import rightreasons as rr
from rightreasons.config import from_dict
from rightreasons.distill import DistillObjective
from rightreasons.distill.explanations import teacher_outputs
from rightreasons.encoding import reencode
from rightreasons.classification import ClassificationConfig, ClassificationTask
from rightreasons.engine import Trainer, run
from rightreasons.guidance import GuideConfig
from rightreasons.errors import UsageError
from rightreasons.explain import explain
from rightreasons.guidance import GuidanceObjective
from rightreasons.models import unwrap_model
from rightreasons.models.bcosify import decay_biases, linear_b, remove_biases, set_b


@pytest.mark.parametrize("name, kwargs", [
    ("bcosified_resnet18", {"inplanes": 8, "layers": [1, 1, 1, 1]}),
    ("bcosified_resnet50", {"inplanes": 8, "layers": [1, 1, 1, 1], "weight_mode": "gain", "keep_bias": True}),
    ("bcosified_densenet121", {"growth_rate": 4, "block_config": [1, 1, 1, 1], "num_init_features": 8}),
    ("bcosified_vitc_ti_patch1_14", {"image_size": 32, "conv_stem": [8, 16], "dim": 16, "depth": 1, "heads": 2,
                                     "mlp_dim": 16}),
    ("bcosified_vit_tiny_patch16_224", {"img_size": 32, "patch_size": 8, "depth": 1, "keep_bias": True}),
])
def test_save_and_load_round_trip(name, kwargs, tmp_path):
    model = rr.create_model(name, num_classes=3, **kwargs).eval()
    with torch.no_grad():
        for p in model.parameters():  # away from the initial values a fresh build would have
            p.add_(0.01 * torch.randn_like(p))
    loaded = rr.load_model(rr.save_model(model, tmp_path / "model.safetensors")).eval()
    assert type(loaded) is type(model) and rr.capabilities(loaded) == rr.capabilities(model)
    x = torch.rand(2, 6, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_a_converted_model_saves_and_reloads_with_its_options(tmp_path):
    source = rr.create_model("resnet18", num_classes=3, inplanes=8)
    converted = rr.bcosify(source, b=1.5, keep_bias=True, weight_mode="gain", mean=(0.5, 0.5, 0.5),
                           std=(0.25, 0.25, 0.25)).eval()
    loaded = rr.load_model(rr.save_model(converted, tmp_path / "model.safetensors")).eval()
    assert loaded.options == converted.options and loaded.logit_layer.bias == 0.0
    x = torch.rand(2, 6, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), converted(x))


@pytest.mark.parametrize("layer", ["input", "mid2"])
def test_a_guidance_step_trains_a_bcosified_model(layer):
    model = rr.bcosify(rr.create_model("resnet18", num_classes=3, inplanes=8)).train()
    x = torch.rand(4, 6, 32, 32)
    labels = F.one_hot(torch.arange(4) % 3, 3).float()
    boxes = [torch.tensor([[4.0, 4.0, 20.0, 20.0]]) for _ in range(4)]
    box_labels = [torch.tensor([n % 3]) for n in range(4)]
    out = GuidanceObjective("bcos", layer, "energy")(model, x, labels, boxes, box_labels,
                                                     torch.ones(4, dtype=torch.bool), torch.Generator().manual_seed(0))
    (F.binary_cross_entropy_with_logits(out.logits, labels) + out.loss).backward()
    assert math.isfinite(out.loss.item()) and out.annotated.all()
    assert model.conv1.linear.weight.grad.abs().sum() > 0


def test_an_e2kd_step_distils_a_bcosified_teacher_into_a_bcosified_student():
    teacher = rr.bcosify(rr.create_model("resnet50", num_classes=3, inplanes=8, layers=[1, 1, 1, 1])).eval()
    student = rr.bcosify(timm.create_model("vit_tiny_patch16_224", num_classes=3, img_size=32, patch_size=8,
                                           depth=1)).train()
    x = torch.rand(4, 6, 32, 32)
    out = DistillObjective(explanation_weight=5.0)(student, x, teacher_outputs(teacher, x, "bcos_weights"))
    out.total.backward()
    assert out.explanations.shape == (4, 6, 32, 32) and math.isfinite(out.terms["explanation"].item())
    assert student.vit.patch_embed.proj.linear.weight.grad.abs().sum() > 0
    assert not any(p.grad is not None for p in teacher.parameters())


def _engine_config(tmp_path, checkpoint, optim=(), **changes) -> ClassificationConfig:
    """A tiny run (16 synthetic 32 px images, batch 4: 4 steps per epoch) fine-tuning the model file ``checkpoint``."""
    return from_dict(GuideConfig if "guidance" in changes else ClassificationConfig, {
        "output_dir": str(tmp_path / "run"), "cpu": True, "log_every": 1,
        "model": {"name": "bcosified_resnet18", "checkpoint": str(checkpoint), "kwargs": {"inplanes": 8}},
        "data": {"name": "synthetic-birds", "image_size": 32, "batch_size": 4, "options": {"n": 16, "size": 32}},
        "optim": {"name": "adamw", "lr": 1e-4, "schedule": "cosine", "epochs": 1, **dict(optim)},
        "loss": {"uniform_off_labels": True}, "eval": {"num_images": 1}, "checkpoint": {"keep_last": 1}, **changes})


def test_the_engine_guides_a_bcosified_model_file(tmp_path):
    converted = rr.bcosify(rr.create_model("resnet18", num_classes=2, inplanes=8))
    checkpoint = rr.save_model(converted, tmp_path / "bcosified.safetensors")
    config = _engine_config(tmp_path, checkpoint, max_steps=2, guidance={
        "method": "bcos", "layer": "input", "loss": "energy", "weight": 1.0})
    summary = run(config)
    assert summary["steps"] == 2 and math.isfinite(summary["history"][-1]["epg"])
    trained = rr.load_model(tmp_path / "run" / "model.safetensors")
    assert rr.capabilities(trained).name == "bcosified_resnet18"
    assert not torch.equal(trained.conv1.linear.weight, converted.conv1.linear.weight)
    assert any((tmp_path / "run" / "explanations").rglob("*.png"))


def test_the_engine_ramps_b_from_1_over_the_configured_epochs(tmp_path):
    checkpoint = rr.save_model(rr.bcosify(rr.create_model("resnet18", num_classes=2, inplanes=8)),
                               tmp_path / "bcosified.safetensors")
    trainer = Trainer(ClassificationTask(_engine_config(tmp_path, checkpoint, optim={"b_ramp_epochs": 2})))
    seen = []  # (training?, B) of every forward pass of the first unit
    unwrap_model(trainer.model).conv1.register_forward_pre_hook(lambda unit, _: seen.append((unit.training, unit.b)))
    trainer.fit()
    # 8 ramp steps (2 epochs of 4): steps 0-3 train with B = 1 + step / 8; validation and export after 4 steps
    assert [b for training, b in seen if training] == [1.0, 1.125, 1.25, 1.375]
    assert {b for training, b in seen if not training} == {1.5}
    exported = rr.load_model(tmp_path / "run" / "model.safetensors")
    assert exported.options.b == 1.5 and {unit.b for unit in exported.bcos_units()} == {1.5}


def test_a_b_ramp_of_a_model_that_is_not_bcosified_is_refused(tmp_path):
    config = _engine_config(tmp_path, None, optim={"b_ramp_epochs": 1}, model={"name": "bcos_resnet18",
                                                                               "kwargs": {"inplanes": 8}})
    with pytest.raises(UsageError, match="optim.b_ramp_epochs needs a B-cosified model .* got BcosResNet"):
        Trainer(ClassificationTask(config))


def test_the_b_ramp_sets_every_unit_and_the_recorded_options(tmp_path):
    assert [linear_b(step, 4) for step in (0, 2, 4, 9)] == [1.0, 1.5, 2.0, 2.0]
    source = rr.create_model("resnet18", num_classes=3, inplanes=8).eval()
    ramped = set_b(rr.bcosify(source, b=2, keep_bias=True, maxpool_to_avgpool=False), 1.0)
    assert {unit.b for unit in ramped.bcos_units()} == {1.0} and ramped.model_args["kwargs"]["b"] == 1.0
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():  # B = 1 with the biases: the original function again
        torch.testing.assert_close(ramped(reencode(x, "none", "bcos")),
                                   source(reencode(x, "none", "normalize")), rtol=1e-4, atol=1e-5)
    assert rr.load_model(rr.save_model(ramped, tmp_path / "m.safetensors")).options.b == 1.0
    with pytest.raises(UsageError, match="B must be >= 1"):
        set_b(ramped, 0.5)
    with pytest.raises(UsageError, match="needs a B-cosified model"):
        set_b(rr.create_model("bcos_resnet18", inplanes=8), 2.0)


def test_bias_decay_then_removal_leaves_a_complete_model(tmp_path):
    model = rr.bcosify(rr.create_model("resnet18", num_classes=3, inplanes=8), keep_bias=True).eval()
    biases = [m.bias for m in model.modules() if isinstance(getattr(m, "bias", None), nn.Parameter)]
    assert len(biases) > 10
    before = [b.detach().clone() for b in biases]
    decay_biases(model, 0.5)
    assert all(torch.allclose(b, 0.5 * b0) for b, b0 in zip(biases, before))
    remove_biases(model)
    assert not [m for m in model.modules() if isinstance(getattr(m, "bias", None), nn.Parameter)]
    x = torch.rand(2, 6, 32, 32, dtype=torch.float64)
    model.double()
    e = explain(model, x, torch.tensor([0, 2]))
    explained = e.logits.gather(1, torch.tensor([[0], [2]]))[:, 0] - model.logit_layer.bias
    torch.testing.assert_close(e.maps.sum((1, 2)), explained, rtol=1e-8, atol=1e-12)
    loaded = rr.load_model(rr.save_model(model.float(), tmp_path / "m.safetensors"))
    assert loaded.options.keep_bias is False and loaded.logit_layer.bias == model.logit_layer.bias == 0.0
