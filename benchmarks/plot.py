"""Draw one PNG per table of a benchmark's Markdown output (``--markdown``).

Every benchmark script writes its tables as Markdown; this reads those files
and, for each table with a ratio column (``x raw``, ``x Lock``, or one named
``a / b`` whose cells read ``1.93x``), draws that ratio per row as horizontal
bars: tenure's rows in one colour, the peers' and the floors' in another, a
line at 1.0. Tables without a ratio column (targets, notes) are skipped.

Usage::

    .venv/bin/python benchmarks/bench_locks.py --markdown /tmp/locks.md
    .venv/bin/python benchmarks/plot.py /tmp/locks.md --out docs/img
    # -> docs/img/locks-1.png, docs/img/locks-2.png, ... (one per table)

Needs matplotlib (in the ``dev`` extra).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

#: Ratio column headers, in order of preference.
RATIO_HEADERS = ("x raw", "x floor", "x lock")
#: A bold table title line, ``**1. Uncontended ...**``.
TITLE = re.compile(r"^\*\*(.+?)\*\*\s*$")


@dataclass
class Table:
    """One Markdown table: its title (the bold line before it), header and rows."""

    title: str
    header: list[str]
    rows: list[list[str]]

    def ratio_column(self) -> int | None:
        """The index of the ratio column to draw, or ``None``: a column named
        ``x raw``, ``x floor`` or ``x Lock``, else the last column named ``a / b``
        whose filled cells all read ``<number>x`` (``1.93x``)."""
        lowered = [h.strip().lower() for h in self.header]
        for wanted in RATIO_HEADERS:
            if wanted in lowered:
                return lowered.index(wanted)
        for i in reversed(range(len(self.header))):
            filled = [row[i] for row in self.rows if i < len(row) and row[i]]
            if (
                "/" in self.header[i]
                and filled
                and all(re.fullmatch(r"-?[\d.,]+x", cell) for cell in filled)
            ):
                return i
        return None

    def labels(self) -> list[str]:
        """Each row's label: its first cell, with its ``n``, ``API`` and ``topology`` cells."""
        lowered = [h.strip().lower() for h in self.header]
        extra = [lowered.index(h) for h in ("n", "api", "topology") if h in lowered]
        return [" ".join([row[0], *(f"({row[i]})" for i in extra)]) for row in self.rows]


def cells(line: str) -> list[str]:
    """The cells of one Markdown table line."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(text: str) -> list[Table]:
    """Every table of ``text``, titled by the last bold line or heading before it."""
    found: list[Table] = []
    title = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := TITLE.match(line):
            title = m.group(1)
        elif line.startswith("#"):
            title = line.lstrip("#").strip()
        elif line.startswith("|") and i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: "):
            header = cells(line)
            i += 2
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            found.append(Table(title, header, rows))
            continue
        i += 1
    return found


def number(cell: str) -> float | None:
    """The number in a cell (``0.69``, ``1.93x``, ``5,747``), or ``None``."""
    m = re.search(r"-?\d[\d,]*(?:\.\d+)?", cell)
    return float(m.group(0).replace(",", "")) if m else None


def draw(table: Table, column: int, path: Path) -> None:
    """Draw ``table``'s ratio ``column`` as horizontal bars into ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [
        (label, value)
        for label, row in zip(table.labels(), table.rows, strict=True)
        if (value := number(row[column])) is not None
    ]
    labels = [label for label, _ in pairs]
    values = [value for _, value in pairs]
    colours = ["tab:blue" if label.startswith("tenure") else "tab:gray" for label in labels]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(pairs) + 1.4))
    ax.barh(range(len(pairs)), values, color=colours)
    ax.set_yticks(range(len(pairs)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    for y, value in enumerate(values):
        ax.text(value, y, f" {value:.2f}", va="center", fontsize=7)
    ax.set_xlabel(table.header[column])
    ax.set_title(table.title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("markdown", nargs="+", type=Path, help="a benchmark's --markdown output")
    parser.add_argument("--out", type=Path, default=Path("docs/img"), help="the PNGs' directory")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for source in args.markdown:
        stem = source.stem.removeprefix("bench_")
        drawn = 0
        for table in tables(source.read_text()):
            column = table.ratio_column()
            if column is None or not table.rows:
                continue
            drawn += 1
            path = args.out / f"{stem}-{drawn}.png"
            draw(table, column, path)
            print(path)
        if not drawn:
            parser.error(f"{source}: no table with a ratio column ({', '.join(RATIO_HEADERS)})")


if __name__ == "__main__":
    main()
