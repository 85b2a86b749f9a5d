"""The benchmark's table: rows of a label and one cell per database, the helpers a cell
reads the results with, and the ratios both the figures and the targets print.

``bench/report.py`` fills it with every scenario's figures, ``bench/targets.py`` with the
targets; both import this module, which imports neither.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

COLUMNS = (("sqlite", "SQLite (WAL)"), ("postgresql", "PostgreSQL"))
# The narrowest columns; wider content widens them. A longer label wraps.
LABEL_WIDTH = 50
LABEL_MAX = 62
CELL_WIDTH = 30
GAP = 2  # spaces at least before a cell

Results = dict[str, dict[str, Any]]  # vendor -> results of bench.run
Cell = Callable[[dict[str, Any]], str]


class Missing(Exception):
    """A figure a cell needs is not in the results."""


# Formatting ---------------------------------------------------------------------------


def number(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}" if seconds >= 0.1 else f"{seconds * 1000:,.1f}"


def spread(stats: dict[str, Any]) -> str:
    """min / median / p99 / max in ms."""
    return " / ".join(ms(stats[key]) for key in ("min", "median", "p99", "max")) + " ms"


def dig(results: dict[str, Any], *path: str) -> Any:
    value: Any = results
    for key in path:
        if not isinstance(value, dict) or key not in value:
            raise Missing(path)
        if "error" in value:
            raise Missing(path)
        value = value[key]
    return value


def status(results: dict[str, Any], scenario: str) -> str | None:
    """'error' or 'skipped: ...' for a scenario that produced no figures, else None."""
    section = results.get(scenario)
    if section is None:
        return "not run"
    if "error" in section:
        return "ERROR"
    if "skipped" in section:
        return f"skipped: {section['skipped']}"
    return None


# The table ----------------------------------------------------------------------------


class Table:
    """Rows of a label and one cell per database, laid out when rendered: each column is as
    wide as its widest entry (at least LABEL_WIDTH and CELL_WIDTH), and a label longer
    than LABEL_MAX wraps, its cells on its last line, so every row lines up."""

    def __init__(self, results: Results) -> None:
        self.results = results
        # A plain line, or a row: (label, cells), or the header: (title, titles, None).
        self.entries: list[str | tuple[str, list[str]] | tuple[str, list[str], None]] = []

    def header(self, title: str) -> None:
        self.entries.append("")
        self.entries.append((title, [title_cell for _, title_cell in COLUMNS], None))

    def section(self, title: str) -> None:
        self.entries.append(title)

    def row(self, label: str, cell: Cell, scenario: str) -> None:
        cells = []
        for vendor, _ in COLUMNS:
            results = self.results.get(vendor)
            if results is None:
                cells.append("-")
                continue
            problem = status(results, scenario)
            if problem:
                cells.append(problem)
                continue
            try:
                cells.append(cell(results))
            except Missing:
                cells.append("-")
        self.entries.append(("  " + label, cells))

    @property
    def lines(self) -> list[str]:
        return self.render(*self.widths())

    def widths(self) -> tuple[int, int]:
        """The label and cell widths this table's content needs."""
        rows = [entry for entry in self.entries if isinstance(entry, tuple)]
        # A cell is right-aligned with GAP spaces at least: a label may fill its column.
        labels = [len(entry[0]) for entry in rows]
        cells = [len(cell) + GAP for entry in rows for cell in entry[1]]
        label_width = max([LABEL_WIDTH, *(width for width in labels if width <= LABEL_MAX)])
        return label_width, max([CELL_WIDTH, *cells])

    def render(self, label_width: int, cell_width: int) -> list[str]:
        lines = []
        for entry in self.entries:
            if isinstance(entry, str):
                lines.append(entry)
                continue
            label, cells = entry[0], entry[1]
            *wrapped, last = textwrap.wrap(label, label_width, subsequent_indent=" " * 4) or [""]
            lines += wrapped
            lines.append(
                (
                    f"{last:<{label_width}}" + "".join(f"{cell:>{cell_width}}" for cell in cells)
                ).rstrip()
            )
            if len(entry) == 3:  # the header's rule
                lines.append("-" * (label_width + cell_width * len(cells)))
        return lines


def any_result(results: Results, *path: str) -> Any:
    for vendor, _ in COLUMNS:
        try:
            return dig(results.get(vendor, {}), *path)
        except Missing:
            continue
    return None


def check(figure: str, ok: bool) -> str:
    """A target's cell: its figure, then PASS or MISS."""
    return f"{figure} {'PASS' if ok else 'MISS'}"


# Ratios -------------------------------------------------------------------------------


def flatness(r: dict[str, Any]) -> float:
    runs = dig(r, "sequential")
    sizes = list(runs)
    return runs[sizes[-1]]["ms_per_step"] / runs[sizes[0]]["ms_per_step"]


def normalized_flatness(r: dict[str, Any]) -> float:
    """The flatness with each size's time per step measured in raw commits: it discounts
    load that slowed the database during one size's runs."""
    runs = dig(r, "sequential")
    sizes = list(runs)
    return runs[sizes[0]]["ratio_to_raw"] / runs[sizes[-1]]["ratio_to_raw"]


def fleet_ratio(r: dict[str, Any]) -> float:
    ours = dig(r, "clusters", "fleet", "1", "steps_per_second")
    return ours / dig(r, "peer", "fleet", "steps_per_second")
