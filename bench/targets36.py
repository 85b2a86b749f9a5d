"""The targets of issue 36 (the complete ``StepEvent``), each printed PASS or MISS."""

from __future__ import annotations

from typing import Any

from .report import Missing, Results, Table, check, dig

#: A run step's WAL bytes, at most this multiple of a raw one-row commit with a 64-byte
#: payload.
STEP_WAL_TIMES_RAW_64 = 2.5


def step_wal(r: dict[str, Any]) -> str:
    figures = dig(r, "history", "wal")
    if "skipped" in figures:
        raise Missing(("PostgreSQL only",))
    step = figures["run_step"]["own_wal_bytes_each"]
    raw = figures["raw_commit_64"]["own_wal_bytes_each"]
    figure = f"{step:,.0f} / {raw:,.0f} B = x{figures['times_raw']:.2f}"
    return check(figure, step / raw <= STEP_WAL_TIMES_RAW_64)


def history_read(r: dict[str, Any]) -> str:
    read = dig(r, "history", "read")
    view, merge = read["view"], read["merge"]
    figure = (
        f"{view['queries']} query {view['ms_median']:.0f} ms "
        f"(merge: {merge['queries']}, {merge['ms_median']:.0f} ms)"
    )
    return check(figure, view["queries"] == 1 and read["events"] == merge["rows"])


def targets_table(results: Results) -> Table:
    table = Table(results)
    table.header("Targets (issue 36)")
    table.row("WAL records of a run step <= 2.5 x a 64-byte raw commit's (PG)", step_wal, "history")
    table.row("one instance's 1,000-step history: one query", history_read, "history")
    return table
