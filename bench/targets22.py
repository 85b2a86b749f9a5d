"""The target of issue 22 (a Prometheus scrape at scale), printed PASS or MISS."""

from __future__ import annotations

from typing import Any

from .report import Results, Table, check, dig, ms

#: A scrape (``metrics.text()``) at a million instances on PostgreSQL, median.
SCRAPE_SECONDS = 0.05


def scrape(r: dict[str, Any]) -> str:
    scraped = dig(r, "metrics")
    figure = f"{ms(scraped['median'])} ms at {scraped['instances']:,}"
    return check(figure, scraped["median"] <= SCRAPE_SECONDS and scraped["instances"] >= 1_000_000)


def targets_table(results: Results) -> Table:
    table = Table(results)
    table.header("Targets (issue 22)")
    table.row("scrape at 1,000,000 instances <= 50 ms", scrape, "metrics")
    return table
