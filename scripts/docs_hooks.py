"""MkDocs hooks (``mkdocs.yml``, ``hooks:``): the reference pages written from the code.

- ``reference/cli.md``: every command and option of ``tenure._cli.build_parser()``,
  from argparse's own help text;
- ``reference/*.md`` of the API: one ``::: tenure.Name`` entry (rendered by
  mkdocstrings from the docstrings) for every name of ``tenure.__all__``,
  grouped by :func:`api_group`, so a public name added to ``__all__`` gets its
  entry without anyone writing it down twice.

- ``reference/json.md``: the ``--json`` output of ``inspect``, ``ls`` and
  ``doctor``, and ``top --json-lines``, from the docstrings of ``tenure._views``,
  ``tenure._doctor`` and ``tenure._views.live`` that define it;
- ``changelog.md``: the repository's ``CHANGELOG.md``, as it is.

Nothing is written into ``docs/``: the pages exist only in the build.
"""

from __future__ import annotations

import argparse
import html
import inspect
import os
from pathlib import Path
from typing import Any

from griffe_runtime_docs import rst_to_markdown
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

#: The API reference pages: (file, title, what the page holds).
API_PAGES: tuple[tuple[str, str, str], ...] = (
    (
        "reference/primitives.md",
        "Primitives",
        "The synchronous classes you construct, and the module's constants. Each has an"
        " asyncio twin, `Async<Name>`, with the same arguments"
        " ([asyncio twins](asyncio.md)).",
    ),
    (
        "reference/asyncio.md",
        "Asyncio twins",
        "The `Async*` classes: the same arguments and meaning as their synchronous twins"
        " ([primitives](primitives.md)); their methods are coroutines.",
    ),
    (
        "reference/leases.md",
        "Leases",
        "What a successful acquire returns: a held lease, with its fence.",
    ),
    (
        "reference/snapshots.md",
        "Snapshots",
        "What `info()` returns: a snapshot of a primitive's state, as the server saw it.",
    ),
    (
        "reference/errors.md",
        "Errors",
        "Every error tenure raises derives from `TenureError`; some also derive from the"
        " builtin they refine (`ValueError`, `TimeoutError`, `PermissionError`).",
    ),
)


#: The primitives first, in the order the guide presents them (the rest follow
#: alphabetically); an ``Async`` twin goes where its synchronous name does.
FIRST = (
    "Lock",
    "RLock",
    "FairLock",
    "ReadWriteLock",
    "ReadWriteView",
    "Semaphore",
    "CountDownLatch",
    "Election",
    "MultiLock",
    "Redlock",
    "RedlockElection",
    "FencedKey",
)


def _order(name: str) -> tuple[int, str, str]:
    base = name.removeprefix("Async")
    return (FIRST.index(base) if base in FIRST else len(FIRST), base, name)


def api_group(name: str) -> str:
    """The API page (a file of :data:`API_PAGES`) on which ``tenure.<name>`` is documented."""
    import tenure
    from tenure import _info

    obj = getattr(tenure, name)
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return "reference/errors.md"
    if getattr(_info, name, None) is obj:
        return "reference/snapshots.md"
    if name.endswith(("Lease", "Leadership")) or name == "LeaseBase":
        return "reference/leases.md"
    if name.startswith("Async"):
        return "reference/asyncio.md"
    return "reference/primitives.md"


def api_pages() -> dict[str, str]:
    """The markdown of each API page, by file."""
    import tenure

    names: dict[str, list[str]] = {page: [] for page, _, _ in API_PAGES}
    for name in sorted(tenure.__all__, key=_order):
        names[api_group(name)].append(name)
    pages = {}
    for page, title, intro in API_PAGES:
        entries = "\n\n".join(f"::: tenure.{name}" for name in names[page])
        pages[page] = f"# {title}\n\n{intro}\n\n{entries}\n"
    return pages


def _usage(parser: argparse.ArgumentParser) -> str:
    return parser.format_usage().removeprefix("usage: ").strip()


def _text(text: str) -> str:
    """Help text as Markdown: ``<uid>`` and the like are text, not HTML tags."""
    return html.escape(text, quote=False)


def _description(parser: argparse.ArgumentParser) -> list[str]:
    """The parser's description: a text block where argparse keeps its layout."""
    if not parser.description:
        return []
    if isinstance(parser._get_formatter(), argparse.RawDescriptionHelpFormatter):
        return ["```text", parser.description.strip("\n"), "```", ""]
    return [_text(parser.description), ""]


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """One markdown list item per option and positional argument of ``parser``."""
    items = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        flags = ", ".join(f"`{s}`" for s in action.option_strings)
        if not flags:
            flags = f"`{action.metavar or action.dest}`"
        elif action.nargs != 0:
            metavar = action.metavar or action.dest.upper()
            flags += f" `{metavar if isinstance(metavar, str) else ' '.join(metavar)}`"
        text = (action.help or "") % {"default": action.default, "prog": parser.prog}
        items.append(f"- {flags}: {_text(text)}".rstrip(": "))
    return items


def cli_page() -> str:
    """The command-line reference: the usage, description and options of every command."""
    from tenure._cli import build_parser

    # The parser takes --url's default from REDIS_URL, and argparse wraps the
    # usage at COLUMNS: neither may change the page.
    saved = {var: os.environ.pop(var, None) for var in ("REDIS_URL", "COLUMNS")}
    os.environ["COLUMNS"] = "100"
    try:
        parser = build_parser()
        page = _cli_markdown(parser)
    finally:
        del os.environ["COLUMNS"]
        os.environ.update({var: value for var, value in saved.items() if value is not None})
    return page


def _cli_markdown(parser: argparse.ArgumentParser) -> str:
    lines = [
        "# Command line",
        "",
        "Generated from the command line's own parser (`tenure --help`,"
        " `tenure COMMAND --help` print the same). The guide pages"
        " [`tenure run`](../guide/run.md), [Operating](../guide/operating.md) and the"
        " [quick start](../quickstart.md) show them at work.",
        "",
        "```text",
        _usage(parser),
        "```",
        "",
        *_description(parser),
        *_options(parser),
    ]
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for group in subparsers:
        helps = {a.dest: a.help or "" for a in group._choices_actions}
        for name, sub in group.choices.items():
            lines += ["", f"## tenure {name}", "", _text(helps.get(name, "")), ""]
            lines += ["```text", _usage(sub), "```", ""]
            lines += _description(sub)
            lines += _options(sub)
            if sub.epilog:
                lines += ["", "```text", sub.epilog, "```"]
            nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
            for inner in nested:
                inner_helps = {a.dest: a.help or "" for a in inner._choices_actions}
                for inner_name, inner_sub in inner.choices.items():
                    lines += ["", f"### tenure {name} {inner_name}", ""]
                    lines += [_text(inner_helps.get(inner_name, "")), ""]
                    lines += ["```text", _usage(inner_sub), "```", ""]
                    lines += _description(inner_sub)
                    lines += _options(inner_sub)
    return "\n".join(lines) + "\n"


#: The module docstrings that define the ``--json`` output, and the words that
#: start the definition in each.
JSON_DOCS = (
    ("tenure._views", "JSON shape of one primitive", "## `tenure inspect` and `tenure ls`"),
    ("tenure._doctor", "JSON (``doctor --json``", "## `tenure doctor`"),
    ("tenure._views.live", "JSON of one refresh", "## `tenure top --json-lines` and the dashboard"),
)


def json_page() -> str:
    """The ``--json`` reference: the definition of each command's JSON output."""
    import importlib

    lines = [
        "# JSON output",
        "",
        "`tenure inspect`, `ls`, `release` and `doctor` print one JSON object with `--json`;"
        " `tenure top --json-lines` prints one per refresh, as the dashboard serves it. Its"
        " shape is stable: keys may be added, never renamed or removed. This page is"
        " generated from the docstrings of the modules that write it.",
    ]
    for module, start, heading in JSON_DOCS:
        doc = importlib.import_module(module).__doc__ or ""
        assert start in doc, f"{module}'s docstring no longer defines its JSON"
        lines += ["", heading, "", rst_to_markdown(doc[doc.index(start) :].strip())]
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: MkDocsConfig, **kwargs: Any) -> Files:
    """Add the generated reference pages to the build."""
    changelog = Path(config.config_file_path).parent / "CHANGELOG.md"
    generated = {
        "reference/cli.md": cli_page(),
        **api_pages(),
        "reference/json.md": json_page(),
        "changelog.md": changelog.read_text(),
    }
    for src_uri, content in generated.items():
        files.append(File.generated(config, src_uri, content=content))
    return files
