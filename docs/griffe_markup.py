"""Griffe extension of the docs build: our older docstrings use reStructuredText markup, the site renders Markdown.

Roles such as ``:func:`~rightreasons.create_model``` become the code span `create_model` (``~`` keeps the last
name, as in Sphinx) and double-backquoted literals become code spans. Links are not made: a role may name an object
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


def to_markdown(text: str) -> str:
    """Docstring text with its reStructuredText roles and literals as Markdown code spans."""
    return LITERAL.sub(r"`\1`", ROLE.sub(r"`\1`", ROLE_SHORT.sub(r"`\1`", text)))


class RestructuredTextToMarkdown(griffe.Extension):
    """Rewrites every docstring with [`to_markdown`][] before mkdocstrings renders it."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
