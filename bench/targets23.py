"""The target of issue 23 (the admin's overview page at scale), printed PASS or MISS."""

from __future__ import annotations

from typing import Any

from .report import Results, Table, check, dig, ms

#: The overview page at a million instances on PostgreSQL, median.
OVERVIEW_SECONDS = 0.3


def overview(r: dict[str, Any]) -> str:
    admin = dig(r, "admin")
    page = admin["overview"]
    figure = f"{ms(page['median'])} ms ({page['queries']} queries) at {admin['instances']:,}"
    return check(figure, page["median"] <= OVERVIEW_SECONDS and admin["instances"] >= 1_000_000)


def targets_table(results: Results) -> Table:
    table = Table(results)
    table.header("Targets (issue 23)")
    table.row("admin overview page at 1,000,000: <= 300 ms", overview, "admin")
    return table
