"""The targets of issue 42 (the change list filtered by replay verdict at a million instances,
and the background pass that stores the verdicts), printed PASS or MISS, with the figures of
scenario 42 (bench/replay_verdicts.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .report import Results, Table, check, dig, ms

#: The change list, filtered by verdict, at 1,000,000 instances: as scenario 12's lists.
FILTERED_LIST_SECONDS = 0.3


def filtered_list(state: str) -> Callable[[dict[str, Any]], str]:
    def cell(r: dict[str, Any]) -> str:
        verdicts = dig(r, "verdicts")
        page = verdicts["change_list"][state]
        figure = f"{ms(page['median'])} ms ({page['queries']} queries) at {verdicts['instances']:,}"
        return check(
            figure,
            page["median"] <= FILTERED_LIST_SECONDS and verdicts["instances"] >= 1_000_000,
        )

    return cell


def pass_rate(r: dict[str, Any]) -> str:
    verdicts = dig(r, "verdicts")
    return (
        f"{verdicts['pass_instances_per_second']:,.0f} instances/s "
        f"({verdicts['pass_instances']:,} of 20 steps)"
    )


def targets_table(results: Results) -> Table:
    table = Table(results)
    table.header("Targets (issue 42)")
    table.row(
        "list ?replays=no at 1,000,000, 1 stranded in 100: <= 300 ms",
        filtered_list("no"),
        "verdicts",
    )
    table.row("the same, 1 stranded in 10,000: <= 300 ms", filtered_list("no_rare"), "verdicts")
    table.row("list ?replays=yes at 1,000,000: <= 300 ms", filtered_list("yes"), "verdicts")
    table.row(
        "list ?replays=unchecked at 1,000,000: <= 300 ms", filtered_list("unchecked"), "verdicts"
    )
    table.row("background pass storing verdicts", pass_rate, "verdicts")
    return table
