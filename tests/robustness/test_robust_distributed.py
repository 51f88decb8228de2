"""Group-robust objectives on two processes equal one process: GroupDRO's group weights and the reweighted loss
are normalised over the global batch (sums across processes), so a ``torchrun`` launch of two processes ends with
the weights and the GroupDRO state of the same run on one process (SGD: float32 rounding only)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from rightreasons.apps.cli import main

CONFIG = """
seed: 3
model: {name: bcos_cifar10_resnet20}
data: {name: synthetic-birds, image_size: 32, batch_size: 8, eval_batch_size: 16,
       options: {n: 32, seed: 1, correlation: 0.75}}
optim: {name: sgd, lr: 0.05, momentum: 0.9, epochs: 1}
eval: {num_images: 0, localization: false}
"""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["groupdro", pytest.param("reweight", marks=pytest.mark.exhaustive)])
def test_two_processes_train_as_one(tmp_path, launch, method):
    (tmp_path / "config.yaml").write_text(CONFIG)
    args = ["robust", "--config", str(tmp_path / "config.yaml"), f"robustness.method={method}",
            "robustness.step_size=0.5", "robustness.adjustment=1"]
    assert main([*args, f"output_dir={tmp_path / 'one'}"]) == 0
    launch([*args, f"output_dir={tmp_path / 'two'}"], processes=2)
    reference, got = (load_file(tmp_path / name / "model.safetensors") for name in ("one", "two"))
    assert max((got[k].double() - reference[k].double()).abs().max().item() for k in reference) < 1e-5
    if method == "groupdro":
        q = [torch.load(next((tmp_path / name / "checkpoints").glob("step-*")) / "custom_checkpoint_0.pkl",
                        weights_only=True)["q"] for name in ("one", "two")]
        assert not torch.equal(q[0], torch.full_like(q[0], 0.25))
        assert torch.allclose(q[0], q[1], atol=1e-6)
