"""Mixed precision through guided and e²KD steps: bf16 autocast and fp16 with dynamic loss scaling against float32.

**bf16.** bfloat16 keeps 8 significant bits: every value an autocast operation rounds moves by up to ``u = 2⁻⁸``
(relative), so a loss, a sum over many rounded terms, stays within ``LOSS_RTOL = 2u`` of float32 (measured: at most
7.4e-4). Gradients are ill-conditioned in the weights: rounding nothing but the float32 weights of the tiny B-cos
ResNet to bfloat16 (a relative change of at most ``u/2``) already moves the parameter gradients of a guided step by
1–6.5 % (measured over seven batches, train mode). A bf16 step cannot be expected closer to float32 than that; it
stays within ``GRAD_RTOL = 32u`` (12.5 %) of float32 — the norm of the difference of all parameter gradients over
the norm of the float32 ones. Measured on the batch of the tests: B-cos at the input 4.5 % (Energy) and 1.9 % (L1), at
the final stage 2.7 % and 3.1 %, e²KD 2.5 %; over seven batches at most 9.3 %.

The L1 loss normalises by the largest positive attribution, so its gradient jumps where two pixels swap as the
maximum (in float32 too, under any perturbation): the tests check that the pixel bf16 picks is a maximum of the
float32 map too — the same pixel, or one that ties with it in float32 (bilinear upsampling of a final-stage map makes
exact ties, which rounding breaks either way) — so that the comparison measures precision and not that discontinuity
(a batch where they picked pixels of different values gave 75 %).

The bf16 convolutions are torch's own (oneDNN switched off): oneDNN's bf16 kernels differ by CPU. On a CPU with AMX
tiles (Sapphire Rapids) they gave 42 % on the e²KD step's batch against 2.4 % with torch's kernels (9.1 % and 4.4 %
for the guided step at the input) — a property of those kernels, measured here so that it is known, not of this
library's handling of precision, which is what these tests check.

**fp16.** float16 has 11 significant bits but a range of 6e-8 to 65504: the gradient of an explanation underflows
where its values are small. The trainer seeds the explanation's backward with the step's loss scale
(``Step.loss_scale`` → ``attribute(grad_scale=...)``) as it scales the loss; the tests drive that path on the CPU
with ``torch.autocast("cpu", torch.float16)`` and ``torch.amp.GradScaler("cpu")``, the trainer itself included (its
accelerator given a CPU scaler, as accelerate builds one on CUDA).
"""

from __future__ import annotations

import copy

import pytest
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.state import AcceleratorState
from torch import Tensor, nn

from rightreasons.bcos import LogitLayer
from rightreasons.config import from_dict
from rightreasons.distill import DistillObjective, teacher_outputs
from rightreasons.engine import Trainer
from rightreasons.engine.step_guard import MAX_BAD_STEPS
from rightreasons.errors import ConfigError
from rightreasons.guidance import GuidanceObjective, GuidanceTask, GuideConfig
from rightreasons.models.resnet import BasicBlock, BcosResNet

BF16_UNIT = 2.0 ** -8
"""Unit roundoff of bfloat16 (8 significant bits)."""
LOSS_RTOL = 2 * BF16_UNIT
GRAD_RTOL = 32 * BF16_UNIT
FP16_GRAD_RTOL = 2.0 ** -5
"""fp16 (loss-scaled): relative error of all parameter gradients. float16's unit roundoff is 2⁻¹¹, 8 times smaller
than bfloat16's, and the gradients' conditioning is the same (module docstring), so 2⁻⁵ = 1/4 of ``GRAD_RTOL``;
measured: 1.2 % for the loss-scaled guided step with tiny explanations, 0.4 % for the e²KD step, against 13 % for
the unscaled guided step."""
SIZE = 32


def bcos_resnet(seed: int = 0, temperature: float | None = None) -> BcosResNet:
    """A three-stage B-cos ResNet of width 4 for 32 px (train mode); ``temperature`` divides its logits."""
    torch.manual_seed(seed)
    model = BcosResNet(BasicBlock, [1, 1, 1], num_classes=5, inplanes=4, small_inputs=True)
    if temperature is not None:
        model.logit_layer = LogitLayer(temperature=temperature)
    return model.train()


def guidance_batch(seed: int = 5, n: int = 4) -> dict[str, object]:
    """B-cos encoded images, labels (class 0, class 3 on even samples) and two boxes per image, all annotated."""
    rgb = torch.rand(n, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))
    labels = torch.zeros(n, 5)
    labels[:, 0] = 1
    labels[::2, 3] = 1
    return {"image": torch.cat([rgb, 1 - rgb], 1), "labels": labels,
            "boxes": [torch.tensor([[4.0, 4.0, 18.0, 20.0], [12.0, 10.0, 28.0, 30.0]])] * n,
            "box_labels": [torch.tensor([0, 3])] * n, "has_boxes": torch.ones(n, dtype=torch.bool)}


def guided_step(model: nn.Module, batch: dict, layer: str, loss: str, dtype: torch.dtype | None = None,
                grad_scale: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
    """``L = BCE + L_loc`` of one guided step under autocast to ``dtype`` (none: float32): the loss, the attribution
    maps and the differentiable total (the explanation's backward seeded with ``grad_scale``)."""
    objective = GuidanceObjective(method="bcos", layer=layer, loss=loss)
    with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
        out = objective(model, batch["image"], batch["labels"], batch["boxes"], batch["box_labels"],
                        batch["has_boxes"], torch.Generator().manual_seed(0), grad_scale=grad_scale)
        total = nn.functional.binary_cross_entropy_with_logits(out.logits.float(), batch["labels"]) + out.loss.float()
    return total.detach(), out.attributions.detach().float(), total


def e2kd_step(student: nn.Module, teacher: nn.Module, images: Tensor, dtype: torch.dtype | None = None,
              grad_scale: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
    """KD + e²KD (``bcos_weights`` at the input) with a live teacher, as the distillation task runs it."""
    objective = DistillObjective(method="bcos_weights", layer="input")
    with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
        teacher_out = teacher_outputs(teacher, images, "bcos_weights", "input", grad_scale=grad_scale)
        out = objective(student, images, teacher_out, grad_scale=grad_scale)
    total = out.total.float()
    return total.detach(), teacher_out.logits.float(), total


def gradients(model: nn.Module, total: Tensor, scale: float = 1.0) -> list[Tensor]:
    """The parameter gradients of ``total`` back-propagated times ``scale``, divided by it."""
    return [g.float() / scale for g in torch.autograd.grad(total * scale, list(model.parameters()))]


def relative_error(reference: list[Tensor], other: list[Tensor]) -> float:
    """``‖other − reference‖ / ‖reference‖`` over all parameter gradients together."""
    a, b = torch.cat([g.flatten() for g in reference]), torch.cat([g.flatten() for g in other])
    return ((b.double() - a.double()).norm() / a.double().norm()).item()


def assert_bf16_within_tolerance(loss32: float, grads32: list[Tensor], loss16: float, grads16: list[Tensor]) -> None:
    """The bf16 step's gradients are finite and its loss and gradients within ``LOSS_RTOL`` / ``GRAD_RTOL`` of
    float32's."""
    assert all(torch.isfinite(g).all() for g in grads16)
    assert abs(loss16 - loss32) <= LOSS_RTOL * abs(loss32)
    assert relative_error(grads32, grads16) <= GRAD_RTOL


@pytest.fixture
def torch_kernels():
    """torch's own CPU kernels rather than oneDNN's, whose bf16 results differ by CPU (module docstring)."""
    with torch.backends.mkldnn.flags(enabled=False):
        yield


@pytest.mark.parametrize("layer, loss", [("input", "energy"), ("input", "l1"), ("final", "energy"),
                                         ("final", "l1")])
def test_bf16_guided_step_is_float32_within_the_stated_tolerance(layer, loss, torch_kernels):
    batch, model = guidance_batch(), bcos_resnet()
    reference = copy.deepcopy(model)
    loss32, maps32, total32 = guided_step(reference, batch, layer, loss)
    grads32 = gradients(reference, total32)
    loss16, maps16, total16 = guided_step(model, batch, layer, loss, torch.bfloat16)
    grads16 = gradients(model, total16)
    assert torch.isfinite(maps16).all()
    if loss == "l1":  # the same pixel normalises, or one of the same float32 value (module docstring)
        flat32 = maps32.flatten(1)
        picked = flat32.gather(1, maps16.flatten(1).argmax(1)[:, None])[:, 0]
        assert torch.allclose(picked, flat32.max(1).values, rtol=2 ** -20, atol=0)
    assert_bf16_within_tolerance(loss32, grads32, loss16, grads16)


def test_bf16_e2kd_step_with_a_live_teacher_is_float32_within_the_stated_tolerance(torch_kernels):
    images = guidance_batch()["image"]
    teacher, student = bcos_resnet(seed=1).eval().requires_grad_(False), bcos_resnet(seed=2)
    reference = copy.deepcopy(student)
    loss32, teacher32, total32 = e2kd_step(reference, teacher, images)
    grads32 = gradients(reference, total32)
    loss16, teacher16, total16 = e2kd_step(student, teacher, images, torch.bfloat16)
    grads16 = gradients(student, total16)
    assert torch.equal(teacher16.argmax(1), teacher32.argmax(1))  # the same classes are explained
    assert_bf16_within_tolerance(loss32, grads32, loss16, grads16)


def scaled_gradients(model: nn.Module, batch: dict, scaler: torch.amp.GradScaler) -> list[Tensor]:
    """A guided step (B-cos at the input, Energy) as the trainer takes it in fp16: under float16 autocast with the
    explanation seeded by the loss scale, the total's backward scaled, the gradients unscaled by the scaler."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    _, _, total = guided_step(model, batch, "input", "energy", torch.float16, grad_scale=scaler.get_scale())
    scaler.scale(total).backward()
    scaler.unscale_(optimizer)
    return [p.grad.clone() for p in model.parameters()]


def test_fp16_explanation_gradients_need_the_loss_scale_and_match_float32_with_it():
    """Logits divided by 1000 make the explanations a thousandth as large (~1e-7 at the input): float16's backward
    flushes them towards zero, so the unscaled step's second-order gradients miss float32's by 13 %; seeded with the
    loss scale they are float32's within ``FP16_GRAD_RTOL`` (measured 1.2 % at 2⁸ and 2¹⁴), as for explanations of
    ordinary size (1.0 % unscaled)."""
    batch = guidance_batch()
    reference = bcos_resnet(temperature=1000.0)
    grads32 = gradients(reference, guided_step(reference, batch, "input", "energy")[2])
    unscaled = bcos_resnet(temperature=1000.0)
    error = relative_error(grads32, gradients(unscaled, guided_step(unscaled, batch, "input", "energy",
                                                                      torch.float16)[2]))
    assert error > 2 * FP16_GRAD_RTOL
    for scale in (2.0 ** 8, 2.0 ** 14):
        grads = scaled_gradients(bcos_resnet(temperature=1000.0), batch, torch.amp.GradScaler("cpu", init_scale=scale))
        assert all(torch.isfinite(g).all() for g in grads)
        assert relative_error(grads32, grads) <= FP16_GRAD_RTOL


def test_fp16_e2kd_step_with_the_loss_scale_is_float32_within_tolerance():
    images = guidance_batch()["image"]
    teacher, student = bcos_resnet(seed=1).eval().requires_grad_(False), bcos_resnet(seed=2)
    reference = copy.deepcopy(student)
    loss32, _, total32 = e2kd_step(reference, teacher, images)
    grads32 = gradients(reference, total32)
    scale = 2.0 ** 10
    loss16, _, total16 = e2kd_step(student, teacher, images, torch.float16, grad_scale=scale)
    grads16 = gradients(student, total16, scale)
    assert abs(loss16 - loss32) <= LOSS_RTOL * abs(loss32)
    assert relative_error(grads32, grads16) <= FP16_GRAD_RTOL


@pytest.fixture
def fresh_accelerate_state():
    """accelerate keeps one process-wide state, fixed by the first Accelerator: reset it around a test that needs
    another precision."""
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_fp16_trainer_skips_overflowing_steps_lowers_the_scale_and_seeds_explanations_with_it(
        tmp_path, monkeypatch, caplog, fresh_accelerate_state):
    """The trainer with accelerate's fp16 set-up, its scaler on the CPU (as accelerate builds it on CUDA): an initial
    scale of 2²² overflows float16 in the explanation's backward, so steps are skipped — more than MAX_BAD_STEPS in a
    row, none counted as bad — while the scale halves, until one fits; every explanation is seeded with the scale of
    its step (the scaler's tensor: no host sync), the weights stay finite and the run trains on. A skipped step is a
    step of the schedule: the epoch's 6 steps are the skipped ones and those that trained."""
    config = from_dict(GuideConfig, {"output_dir": str(tmp_path / "run"), "cpu": True, "mixed_precision": "fp16",
                                     "log_with": [], "model": {"name": "bcos_cifar10_resnet20"},
                                     "data": {"image_size": 16, "batch_size": 4, "options": {"n": 24}},
                                     "optim": {"epochs": 1}})
    initial = 2.0 ** 22
    accelerator = Accelerator(cpu=True, mixed_precision="fp16", dataloader_config=DataLoaderConfiguration(
        split_batches=True), project_dir=config.output_dir)
    accelerator.native_amp, accelerator.scaler = True, torch.amp.GradScaler("cpu", init_scale=initial)
    seeds: list[float] = []
    import rightreasons.guidance.objective as objective

    def recording(*args, grad_scale: float = 1.0, **kwargs):
        seeds.append(float(grad_scale))
        return attribute(*args, grad_scale=grad_scale, **kwargs)

    attribute = objective.attribute
    monkeypatch.setattr(objective, "attribute", recording)
    trainer = Trainer(GuidanceTask(config), accelerator)
    before = {k: v.clone() for k, v in trainer.bare_model.state_dict().items()}
    with caplog.at_level("INFO", logger="rightreasons.engine.trainer"):
        trainer.fit()
    skipped = [r.getMessage() for r in caplog.records if "step skipped, scale lowered" in r.getMessage()]
    taken = 6 - len(skipped)
    assert len(skipped) > MAX_BAD_STEPS and taken > 0 and trainer.position.step == 6 and trainer.bad_steps == 0
    assert accelerator.scaler.get_scale() == initial / 2 ** len(skipped)
    assert seeds == [initial / 2 ** i for i in range(len(skipped))] + [initial / 2 ** len(skipped)] * taken
    weights = trainer.bare_model.state_dict()
    assert all(torch.isfinite(v).all() for v in weights.values() if v.is_floating_point())
    assert any(not torch.equal(before[k], v) for k, v in weights.items())


def test_fp16_without_a_cuda_gpu_is_refused_naming_the_key(tmp_path, fresh_accelerate_state):
    """On the CPU accelerate sets up neither float16 autocast nor a loss scaler, so the run would silently be a
    float32 one: the trainer refuses it before writing anything."""
    config = from_dict(GuideConfig, {"output_dir": str(tmp_path / "run"), "cpu": True, "mixed_precision": "fp16",
                                     "model": {"name": "bcos_cifar10_resnet20"}})
    with pytest.raises(ConfigError, match=r"mixed_precision: fp16 needs a CUDA GPU .* on 'cpu' accelerate would "
                                          r"train in float32\. Use mixed_precision: bf16"):
        Trainer(GuidanceTask(config))
    assert not (tmp_path / "run").exists()
