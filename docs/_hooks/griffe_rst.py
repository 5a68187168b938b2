"""Griffe extension: render the reST of smr's docstrings as Markdown.

The docstrings are written for reST readers: roles (``:class:`Job```, ``:func:`connect```),
double-backtick literals and ``::`` before an indented literal block. Double backticks are
already a Markdown code span and an indented block already a code block; this turns each
role into a code span (``~a.b.C`` shows ``C``, as in Sphinx) and drops the ``::`` markers,
so that the API pages read as the source does without leaving reST syntax on the page.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|exc|attr|data|mod|obj|const):`(~?)([^`]+)`")
# "text::" ends a paragraph before a literal block: it reads "text:".
TRAILING = re.compile(r"(\S)::$", re.MULTILINE)
# A "::" alone on its line introduces a literal block and shows nothing.
ALONE = re.compile(r"^[ \t]*::[ \t]*$", re.MULTILINE)


def _role(match: re.Match[str]) -> str:
    target = match.group(2)
    if match.group(1):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def markdown_of(text: str) -> str:
    text = ROLE.sub(_role, text)
    text = TRAILING.sub(r"\1:", text)
    return ALONE.sub("", text)


class RestToMarkdown(griffe.Extension):
    """Rewrite every docstring griffe loads."""

    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_of(obj.docstring.value)
