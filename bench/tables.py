"""The plain-text table every benchmark here prints (a script a user runs: columns padded, a rule under the
header)."""

from __future__ import annotations

from collections.abc import Sequence


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(header))]
    for row in [cells[0], ["-" * width for width in widths], *cells[1:]]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
