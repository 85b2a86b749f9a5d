"""The targets of issue 24 (reaction time with the default settings), each printed PASS or
MISS."""

from __future__ import annotations

from typing import Any

from .report import Results, Table, check, dig

#: Kill to the next attempt, with the default settings (a 12 s lease, a sweep every 5 s).
KILL_TO_RETRY_SECONDS = 20.0


def kill_to_retry(r: dict[str, Any]) -> str:
    figures = dig(r, "recovery", "kill_to_retry")
    return check(
        f"{figures['median']:.1f} / {figures['max']:.1f} s",
        figures["max"] <= KILL_TO_RETRY_SECONDS,
    )


def targets_table(results: Results) -> Table:
    table = Table(results)
    table.header("Targets (issue 24)")
    table.row(
        "kill -> next attempt, defaults: median / max <= 20 s",
        kill_to_retry,
        "recovery",
    )
    return table
