"""The command line reports the user's errors as one ``error:`` line (exit code 2) and lets bugs keep their
traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rightreasons.apps import cli
from rightreasons.errors import ConfigError, RightReasonsError
from guards import GUARD_S


def test_user_errors_become_one_line_and_exit_code_2(tmp_path, capsys):
    assert cli.main(["train", "--config", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rightreasons train: error: config file not found") and err.count("\n") == 1


def test_a_bug_keeps_its_traceback(monkeypatch):
    def broken(args):
        raise TypeError("a bug, not the user's fault")

    monkeypatch.setattr("rightreasons.apps.cli.models.run", broken)
    with pytest.raises(TypeError, match="a bug"):
        cli.main(["models"])


def test_every_error_class_of_the_package_is_a_user_error():
    import rightreasons.errors as errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), RightReasonsError), name
    assert issubclass(ConfigError, ValueError)


def test_unknown_names_through_the_console_script(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rightreasons", "explain", "--model", "bcos_resnet81", "x.png",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=GUARD_S)
    assert done.returncode == 2 and "did you mean bcos_resnet18" in done.stderr and "Traceback" not in done.stderr


def test_generation_options_on_a_synthetic_dataset_read_from_disk_are_one_error_line(tmp_path, capsys):
    """The shipped distill config generates its data in memory (``data.options: {n: 32, size: 32}``); pointed at a
    dataset written by ``data synth`` it used to end in a raw ValueError traceback from the loader."""
    assert cli.main(["data", "synth", "--out", str(tmp_path / "data"), "--task", "synthetic-birds", "--size", "32",
                     "--n-train", "8", "--n-val", "4", "--n-test", "4"]) == 0
    capsys.readouterr()
    assert cli.main(["cache", "--config", "configs/distill/synthetic.yaml", "--out", str(tmp_path / "cache"),
                     f"data.root={tmp_path / 'data'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rightreasons cache: error: ") and err.count("\n") == 1
    assert "data.options" in err and "'n', 'size'" in err and "index.json" in err
    assert not (tmp_path / "cache").exists()


_IMAGE_OPTIONS = ["--data", "synthetic-birds", "--image-size", "32", "--num-images", "2"]


@pytest.mark.parametrize("args, named", [
    (["demo", "--seeds", "0"], "--seeds"),
    (["demo", "--quick", "--seeds", "-2"], "--seeds"),
    (["data", "synth", "--task", "synthetic-birds", "--size", "0"], "--size"),
    (["data", "synth", "--task", "synthetic-birds", "--size", "32", "--n-train", "-3"], "--n-train"),
    (["data", "synth", "--task", "synthetic-birds", "--size", "32", "--correlation", "2"], "--correlation"),
    (["data", "synth", "--task", "synthetic-birds", "--size", "32", "--correlation", "nan"], "--correlation"),
    (["data", "synth", "--task", "synthetic-birds", "--size", "32", "--difficulty", "3"], "--difficulty"),
    (["data", "synth", "--task", "synthetic-multilabel", "--size", "32", "--max-objects", "5"], "--max-objects"),
    (["data", "synth", "--task", "synthetic-birds", "--size", "32", "--seed", "-1"], "--seed"),
    (["analyze", "shift", "--model", "bcos_resnet18", *_IMAGE_OPTIONS, "--batch-size", "0"], "--batch-size"),
    (["analyze", "shift", "--model", "bcos_resnet18", "--data", "synthetic-birds", "--image-size", "0"],
     "--image-size"),
    (["cache", "--config", "configs/distill/synthetic.yaml", "--batch-size", "0"], "--batch-size"),
    (["cache", "--config", "configs/distill/synthetic.yaml", "--shard-size", "0"], "--shard-size"),
    (["explain", "--model", "bcos_resnet18", "--random-weights", "--device", "bogus", "x.png"], "--device"),
    (["explain", "--model", "bcos_resnet18", "--random-weights", "--device", "cuda:99", "x.png"], "--device"),
])
def test_out_of_range_command_line_values_are_one_error_line(tmp_path, capsys, args, named):
    """Each of these once ended in a traceback (a ValueError or RuntimeError from deep inside) or, worse, was taken as
    "use the default" (``--image-size 0``, ``--batch-size 0``)."""
    out = ["--out", str(tmp_path / "out")]
    try:
        code = cli.main(args + out)
    except SystemExit as e:  # argparse ends a bad command line itself
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    last = err.rstrip("\n").splitlines()[-1]  # argparse prints its usage first
    assert "Traceback" not in err and " error: " in last and named in last, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("override, named", [
    # the generator of an in-memory synthetic dataset
    ("data.options.correlation=2", "'correlation'"), ("data.options.difficulty=-0.5", "'difficulty'"),
    ("data.options.n=-5", "'n'"), ("data.options.size=abc", "'size'"), ("data.options.seed=1.5", "'seed'"),
    # the options every dataset takes, and those training sets itself
    ("data.options.box_dilation=-1", "'box_dilation'"), ("data.options.box_dilation=nan", "'box_dilation'"),
    ("data.options.box_policy=bogus", "'box_policy'"), ("data.options.annotated_fraction=0.5", "data.annotated_fraction"),
    ("data.options.transform=3", "data.image_size"), ("seed=-1", "seed"),
    # constructor arguments: types (YAML reads nan as a string) and ranges
    ("model.kwargs.b=nan", "model.kwargs: bcos_resnet18: b: expected a number, got 'nan'"),
    ("model.kwargs.logit_bias=nan", "logit_bias: expected float | null, got 'nan'"),
    ("model.kwargs.inplanes=0", "inplanes"), ("model.kwargs.in_chans=0", "in_chans"),
    ("model.kwargs.stochastic_depth_prob=2", "stochastic_depth_prob"), ("model.name=bcos_resnet81", "bcos_resnet18"),
])
def test_bad_config_values_are_one_error_line(tmp_path, capsys, override, named):
    """Each of these used to end in a traceback (a ValueError, TypeError or RuntimeError from a loader, a comparison
    or the first forward pass), some only after training had started building its datasets."""
    assert cli.main(["train", "--config", str(_synthetic_train_config(tmp_path)), override]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rightreasons train: error: ") and err.count("\n") == 1, err
    assert named in err, err
    run = tmp_path / "run"  # at most the lock that training takes before it builds anything
    assert not run.exists() or [p.name for p in run.rglob("*")] == [".lock"]


def _synthetic_train_config(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text(f"output_dir: {tmp_path / 'run'}\nmodel: {{name: bcos_resnet18, kwargs: {{inplanes: 8}}}}\n"
                    "data: {name: synthetic-birds, image_size: 32, options: {n: 8}}\noptim: {epochs: 1}\n")
    return path


@pytest.mark.parametrize("override, named", [
    ("teacher.name=bcos_resnet81", "teacher.name: unknown model 'bcos_resnet81'; did you mean bcos_resnet18"),
    ("teacher.kwargs.b=nan", "teacher.kwargs: bcos_cifar10_resnet20: b: expected a number, got 'nan'"),
    ("distill.shots_seed=-1", "distill.shots_seed: expected an integer >= 0"),
])
def test_bad_distillation_config_values_are_one_error_line_before_anything_is_built(tmp_path, capsys, override,
                                                                                    named):
    """The teacher's name and arguments are checked when the config is read, with the key path in the message (an
    unknown teacher used to be reported without saying it was the teacher's name, once training had started)."""
    assert cli.main(["distill", "--config", "configs/distill/synthetic.yaml", override,
                     f"output_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rightreasons distill: error: configs/distill/synthetic.yaml: ") and named in err, err
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


_A_FILE = "{file}"


@pytest.mark.parametrize("args", [
    ["explain", "--model", "bcos_resnet18", "--random-weights", "--out", _A_FILE, "docs/figures/guidance_study.png"],
    ["cache", "--config", "configs/distill/synthetic.yaml", "--out", _A_FILE],
    ["analyze", "shift", "--model", "bcos_resnet18", *_IMAGE_OPTIONS, "--out", _A_FILE],
    ["demo", "--quick", "--out", _A_FILE],
    ["study", "guidance", "configs/studies/guidance.yaml", "--set", "seeds=1", "--out", _A_FILE],
    ["data", "synth", "--task", "synthetic-birds", "--size", "16", "--out", _A_FILE],
    ["sweep", "configs/guidance/grids/guidance.yaml", "--collect-only", "--report", _A_FILE],
    ["bcosify", "--model", "resnet18", "--out", _A_FILE + "/converted.safetensors"],
    ["evaluate", "--checkpoint", "missing.safetensors", "--out", _A_FILE + "/test.json"],
    ["distill", "--config", "configs/distill/synthetic.yaml", "output_dir=" + _A_FILE],
])
def test_an_output_path_blocked_by_a_file_is_one_error_line_before_any_work(tmp_path, capsys, args):
    """Each of these (but distill) used to end in a FileExistsError or NotADirectoryError traceback, some after the
    work was done (the sweep's report folder after every training)."""
    blocker = tmp_path / "results.txt"
    blocker.write_text("the user's file\n")
    assert cli.main([a.replace(_A_FILE, str(blocker)) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{blocker} is a file, not a directory" in err, err
    assert blocker.read_text() == "the user's file\n" and sorted(p.name for p in tmp_path.iterdir()) == [blocker.name]


def test_a_sweep_filter_that_matches_no_run_is_an_error(capsys):
    assert cli.main(["sweep", "configs/guidance/grids/guidance.yaml", "--only", "nothing-matches", "--dry-run"]) == 2
    assert "has a name containing 'nothing-matches'" in capsys.readouterr().err


@pytest.mark.parametrize("args", [
    ["bcosify", "--model", "resnet18", "--out", "{dir}"],
    ["evaluate", "--checkpoint", "missing.safetensors", "--out", "{dir}"],
])
def test_an_output_file_that_is_a_directory_is_one_error_line_before_any_work(tmp_path, capsys, args):
    """``bcosify`` converted the model and ``evaluate`` scored it before failing on the directory with a traceback."""
    assert cli.main([a.replace("{dir}", str(tmp_path)) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {tmp_path} is a directory; name a file in it" in err, err


def test_a_models_pattern_that_matches_nothing_is_an_error_with_close_names(capsys):
    """It used to print nothing and exit 0, which a script cannot tell from success."""
    assert cli.main(["models", "bcos_resnt18"]) == 2
    assert "no registered model matches 'bcos_resnt18'; did you mean bcos_resnet18" in capsys.readouterr().err
    assert cli.main(["models", "bcos_resnet1*"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["bcos_resnet101", "resnet"]
