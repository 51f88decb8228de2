"""Griffe extension of the docs build: our older docstrings use reStructuredText markup, the site renders Markdown.

Roles such as ``:func:`~rightreasons.create_model``` become the code span `create_model` (``~`` keeps the last
name, as in Sphinx) and double-backquoted literals become code spans. An argument entry that names several
arguments at once (``in_features, out_features: sizes of the last dimension.``, which Google style has no form for)
becomes one entry per argument with the same text. Links are not made: a role may name an object
that no API page shows, and the strict build refuses links that lead nowhere. Docstrings written in Markdown pass
through unchanged. Loaded by `mkdocs.yml` (mkdocstrings' python handler, `extensions`).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE_SHORT = re.compile(r":[a-z]+(?::[a-z]+)?:`~(?:[\w.]*\.)?([^`.]+)`")
ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`([^`]+)`")
LITERAL = re.compile(r"``(.+?)``")
GROUPED = re.compile(r"^(\s+)(\w+(?:, \w+)+):(.*)$")


def to_markdown(text: str) -> str:
    """Docstring text with its reStructuredText roles and literals as Markdown code spans."""
    return LITERAL.sub(r"`\1`", ROLE.sub(r"`\1`", ROLE_SHORT.sub(r"`\1`", text)))


def split_grouped_arguments(text: str) -> str:
    """Docstring text with each ``a, b: text`` entry (and its indented continuation lines) repeated per name."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        match = GROUPED.match(lines[i])
        if match is None:
            out.append(lines[i])
            i += 1
            continue
        indent, names, first = match.groups()
        end = i + 1
        while end < len(lines) and lines[end].strip() and len(lines[end]) - len(lines[end].lstrip()) > len(indent):
            end += 1
        for name in names.split(", "):
            out += [f"{indent}{name}:{first}", *lines[i + 1:end]]
        i = end
    return "\n".join(out)


class RestructuredTextToMarkdown(griffe.Extension):
    """Rewrites every docstring with [`to_markdown`][] and [`split_grouped_arguments`][] before mkdocstrings renders
    it."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = split_grouped_arguments(to_markdown(obj.docstring.value))
