"""``rightreasons.apps.cli.arguments``: the argument types refuse what they must while the command line is parsed, and
``--resume`` gives a config override that argparse took for its CHECKPOINT back to the overrides."""

from __future__ import annotations

import argparse

import pytest

from rightreasons.apps.cli.arguments import (add_resume, non_negative_int, positive_int, resume_and_overrides,
                                        torch_device, unit_float)


@pytest.mark.parametrize("kind, good, bad", [
    (positive_int, ["1", "64"], ["0", "-3", "1.5", "x", ""]),
    (non_negative_int, ["0", "7"], ["-1", "2.0", "nan"]),
    (unit_float, ["0", "0.25", "1", "1e-3"], ["-0.1", "1.01", "nan", "inf", "half"]),
    (torch_device, ["cpu", "cpu:0"], ["gpu", "cuda:99", ""]),
])
def test_argument_types(kind, good, bad):
    for text in good:
        kind(text)
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            kind(text)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_resume(parser)
    parser.add_argument("overrides", nargs="*")
    return parser.parse_args(argv)


def test_resume_hands_an_override_it_swallowed_back(tmp_path):
    checkpoint = tmp_path / "step-000010"
    checkpoint.mkdir()
    assert resume_and_overrides(_parse(["a=1"])) == (False, ["a=1"])
    assert resume_and_overrides(_parse(["a=1", "--resume"])) == (True, ["a=1"])
    assert resume_and_overrides(_parse(["--resume", "optim.lr=0.5", "b=2"])) == (True, ["optim.lr=0.5", "b=2"])
    assert resume_and_overrides(_parse(["--resume", str(checkpoint), "b=2"])) == (str(checkpoint), ["b=2"])
