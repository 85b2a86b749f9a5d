"""The target of issue 22 (a Prometheus scrape at scale), printed PASS or MISS."""

from __future__ import annotations

from typing import Any

from .report import Results, Table, check, dig, ms

#: A scrape (``metrics.text()``) at a million instances on PostgreSQL, median.
SCRAPE_SECONDS = 0.05


def scrape(r: dict[str, Any]) -> str:
    """Both medians: with the process rows unchanged since the last scrape, and with every
    row flushed again before each (a fleet of live workers, what most scrapes see)."""
    scraped = dig(r, "metrics")
    slowest = max(scraped["median"], scraped["reflushed_median"])
    figure = (
        f"{ms(scraped['median'])} / {ms(scraped['reflushed_median'])} ms "
        f"at {scraped['instances']:,}"
    )
    return check(figure, slowest <= SCRAPE_SECONDS and scraped["instances"] >= 1_000_000)


def targets_table(results: Results) -> Table:
    table = Table(results)
    table.header("Targets (issue 22)")
    table.row(
        "scrape at 1,000,000: median <= 50 ms, rows kept / reflushed",
        scrape,
        "metrics",
    )
    return table
