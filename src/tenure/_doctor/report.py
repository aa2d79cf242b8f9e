"""The doctor's text output."""

from __future__ import annotations

import textwrap

from .findings import Level, Report

# --- text output ----------------------------------------------------------------------------

_LABELS = {Level.OK: "ok", Level.NOTE: "note", Level.HAZARD: "HAZARD"}
_STYLES = {Level.OK: "green", Level.NOTE: "yellow", Level.HAZARD: "bold red"}
_WIDTH = 100


def report_lines(report: Report) -> list[tuple[Level | None, str]]:
    """The report as text lines, each with the level that colours it (``None``: plain)."""
    server = str(report.server) if report.server else "unknown (INFO server refused)"
    lines: list[tuple[Level | None, str]] = [(None, f"server: {server}")]
    column = max(len(f.check) for f in report.findings) + 2
    indent = " " * (8 + column)
    for f in report.findings:
        head = f"{_LABELS[f.level]:<8}{f.check:<{column}}"
        text = textwrap.fill(f.message, _WIDTH, initial_indent=head, subsequent_indent=indent)
        lines.append((f.level, text))
        if f.advice and f.level is not Level.OK:
            advice = textwrap.fill(
                "what to do: " + f.advice, _WIDTH, initial_indent=indent, subsequent_indent=indent
            )
            lines.append((None, advice))
    n = report.hazards
    if n:
        verdict = (
            f"{n} hazard{'s' if n > 1 else ''}: a lock on this server can be lost or granted twice"
        )
        lines.append((Level.HAZARD, verdict))
    else:
        lines.append((Level.OK, "no hazards found"))
    return lines


def print_report(report: Report) -> None:
    """Print the report on stdout, coloured by rich when it is installed and stdout
    is a terminal."""
    lines = report_lines(report)
    try:
        from rich.console import Console
        from rich.text import Text
    except ModuleNotFoundError:
        for _, text in lines:
            print(text)
        return
    console = Console(highlight=False, soft_wrap=True)
    for level, text in lines:
        console.print(Text(text, style=_STYLES[level] if level else ""))
