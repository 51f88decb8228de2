"""Every command's ``--help`` ends with an example of it (issue 35, item 6), kept as written (not re-wrapped)."""

from __future__ import annotations

import argparse

from rightreasons.apps import cli


def _commands(parser: argparse.ArgumentParser, name: str = "rightreasons"):
    """(the command line that reaches it, parser) for every sub-command, an alias once."""
    seen: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield f"{name} {sub_name}", sub
                    yield from _commands(sub, f"{name} {sub_name}")


def test_every_command_help_ends_with_an_example_of_that_command():
    commands = dict(_commands(cli.build_parser()))
    assert set(cli.COMMANDS) <= {name.split()[1] for name in commands}
    for name, parser in commands.items():
        lines = parser.format_help().splitlines()
        heading = next((i for i, line in enumerate(lines) if line in ("Example:", "Examples:")), None)
        assert heading is not None, f"{name} --help has no Example"
        examples = lines[heading + 1:]
        assert examples and all(line.startswith(f"  {name} ") for line in examples), (name, examples)


def test_an_example_line_is_not_wrapped():
    parser = cli.Parser(prog="p", epilog=cli.arguments.examples("rightreasons x " + "--option value " * 12))
    assert parser.format_help().splitlines()[-1] == "  rightreasons x " + ("--option value " * 12).rstrip()
