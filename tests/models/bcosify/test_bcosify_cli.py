"""``rightreasons bcosify``: a registered model and a model file written by training are converted into loadable B-cos
model files; bad input ends in one ``error:`` line and exit code 2."""

from __future__ import annotations

import torch

import rightreasons as rr
from rightreasons.apps import cli
from rightreasons.encoding import reencode


def test_a_registered_model_with_torchvision_weights_becomes_a_loadable_file(tmp_path, run_cli):
    source = rr.create_model("resnet18", num_classes=4).eval()
    weights = tmp_path / "resnet18.pth"
    torch.save(source.state_dict(), weights)  # a plain torchvision-layout state dict
    out = tmp_path / "bcosified.safetensors"
    done = run_cli("bcosify", "--model", "resnet18", "--checkpoint", weights, "--num-classes", "4", "--b", "1",
                   "--keep-bias", "--keep-maxpool", "--out", out)
    assert done.returncode == 0, done.stderr
    assert "bcosified_resnet18" in done.stdout and '"checkpoint"' in done.stdout
    converted = rr.load_model(out).eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():  # B = 1 with biases and max-pooling: the torchvision model's function
        torch.testing.assert_close(converted(reencode(x, "none", "bcos")), source(reencode(x, "none", "normalize")),
                                   rtol=1e-4, atol=1e-5)


def test_a_model_file_written_by_training_is_converted_with_its_architecture(tmp_path):
    trained = rr.save_model(rr.create_model("densenet121", num_classes=3, growth_rate=4, block_config=(1, 1, 1, 1),
                                            num_init_features=8), tmp_path / "model.safetensors")
    out = tmp_path / "bcosified.safetensors"
    assert cli.main(["bcosify", "--checkpoint", str(trained), "--weight-mode", "gain", "--out", str(out)]) == 0
    converted = rr.load_model(out)
    caps = rr.capabilities(converted)
    assert caps.name == "bcosified_densenet121" and caps.bcos and caps.num_classes == 3
    assert converted.options.weight_mode == "gain" and not converted.options.keep_bias


def test_an_unknown_model_is_one_error_line_with_exit_code_2(tmp_path, run_cli):
    done = run_cli("bcosify", "--model", "resnet81", "--out", tmp_path / "x.safetensors")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("rightreasons bcosify: error: unknown model 'resnet81'; did you mean resnet18")
    assert not (tmp_path / "x.safetensors").exists()


def test_a_bcos_model_is_refused(tmp_path, capsys):
    assert cli.main(["bcosify", "--model", "bcos_cifar10_resnet20", "--out", str(tmp_path / "x.safetensors")]) == 2
    assert "error: bcosify: BcosResNet is a B-cos network already" in capsys.readouterr().err
