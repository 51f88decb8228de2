"""``rightreasons completion bash|zsh`` (issue 35, item 6): the script is generated from the parser and completes
commands, sub-commands, options and choices in a real bash."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from rightreasons.apps.cli import COMMANDS, main
from guards import GUARD_S


@pytest.fixture
def script(tmp_path, capsys):
    assert main(["completion", "bash"]) == 0
    path = tmp_path / "rightreasons.bash"
    path.write_text(capsys.readouterr().out)
    return path


def _complete(script, line: str) -> list[str]:
    """What bash offers for the command ``line`` (its last word is being completed)."""
    words = shlex.split(line) + ([""] if line.endswith(" ") else [])
    code = (f"source {shlex.quote(str(script))}\ncomplete -p rightreasons\n"
            f"COMP_WORDS=({' '.join(map(shlex.quote, words))}); COMP_CWORD={len(words) - 1}\n"
            '_rightreasons; printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "--norc", "-c", code], capture_output=True, text=True, timeout=GUARD_S)
    assert done.returncode == 0, done.stderr
    registration, *offered = done.stdout.splitlines()
    assert registration == "complete -o default -F _rightreasons rightreasons"
    return [word for word in offered if word]


@pytest.mark.parametrize(("line", "expected"), [
    ("rightreasons ev", ["evaluate"]),
    ("rightreasons ", sorted(COMMANDS)),
    ("rightreasons --quiet tr", ["train"]),
    ("rightreasons train --pr", ["--print-config"]),
    ("rightreasons data s", ["synth"]),
    ("rightreasons data synth --task ", ["all", "synthetic-birds", "synthetic-multilabel"]),
    ("rightreasons prepare voc --t", ["--tars"]),
    ("rightreasons completion ", ["bash", "zsh"]),
    ("rightreasons train --config ", []),  # no words: bash completes file names (complete -o default)
])
def test_bash_completes_commands_options_and_choices(script, line, expected):
    assert sorted(_complete(script, line)) == sorted(expected)


def test_the_zsh_script_is_the_bash_one_through_bashcompinit(script, capsys):
    assert main(["completion", "zsh"]) == 0
    text = capsys.readouterr().out
    assert "bashcompinit" in text.splitlines()[1] and text.endswith(script.read_text())


def test_an_unknown_shell_is_one_error_line(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["completion", "fish"])
    assert stopped.value.code == 2
    assert "argument shell: invalid choice: 'fish'" in capsys.readouterr().err.splitlines()[-1]


def test_the_script_is_generated_without_loading_torch():
    """A shell start-up file may run it: it must answer as fast as `--help` does."""
    code = ("import contextlib, io, sys\nfrom rightreasons.apps.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    assert main(['completion', 'bash']) == 0\n"
            "print(sorted(m for m in ('torch', 'torchvision', 'timm', 'accelerate') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=GUARD_S)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
