"""A griffe extension (``mkdocs.yml``): the docstrings as Python shows them, in Markdown.

- The public classes' docstrings are completed when their module is imported:
  :func:`tenure._api._async._docs.shared_args` fills the ``{client}`` and
  ``{lease_args}`` placeholders with the arguments several classes share.
  griffe reads the source, so a class docstring with a placeholder is replaced
  by the imported class's ``__doc__``, the text ``help()`` shows.
- The docstrings cross-reference in reStructuredText roles
  (``:class:`Lease```, ``:meth:`~tenure.Lock.acquire```), which Markdown would
  print as they are: each becomes a code span of the name (its last part with
  ``~``, as Sphinx shows it).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import griffe

#: A reStructuredText cross-reference role and its target.
ROLE = re.compile(r":(?:py:)?(?:class|meth|func|data|attr|mod|exc|obj):`(~?)([^`]+)`")


def _markdown(text: str) -> str:
    """``text`` with each reStructuredText role made a code span of its target."""

    def code(match: re.Match[str]) -> str:
        target = match[2].rsplit(".", 1)[-1] if match[1] else match[2]
        return f"`{target}`"

    return ROLE.sub(code, text)


def rst_to_markdown(text: str) -> str:
    """A reStructuredText docstring's text as Markdown: roles as code spans, and
    each literal block (an indented block after a paragraph ending ``::``) fenced."""
    out: list[str] = []
    lines = _markdown(text).splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.endswith("::"):
            out.append(line)
            i += 1
            continue
        out += [line[:-1], ""]  # "shape::" reads "shape:"
        i += 1
        block: list[str] = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith("    ")):
            block.append(lines[i][4:])
            i += 1
        text_block = "\n".join(block).strip("\n")
        out += ["```text", text_block, "```", ""]
    return "\n".join(out)


class RuntimeDocstrings(griffe.Extension):
    """Fill a class's shared-argument placeholders; turn roles into code spans."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _markdown(obj.docstring.value)

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        if cls.docstring is None or "{" not in cls.docstring.value:
            return
        try:
            runtime = griffe.dynamic_import(cls.path)
        except ImportError:
            return
        doc = inspect.getdoc(runtime)
        if doc:
            cls.docstring.value = _markdown(doc)
