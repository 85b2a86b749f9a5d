"""The targets of issue 15 (performance and scale), each printed PASS or MISS."""

from __future__ import annotations

from typing import Any

from .report import Missing, Results, Table, check, dig, fleet_ratio, ms


def _postgresql(r: dict[str, Any]) -> bool:
    return r["environment"]["vendor"] == "postgresql"


def _middle(r: dict[str, Any]) -> str:
    sizes = list(dig(r, "sequential").keys())
    return "1000" if "1000" in sizes else sizes[len(sizes) // 2]


def sequential(r: dict[str, Any]) -> str:
    versus = dig(r, "peer", "sequential", "ratio")
    if _postgresql(r):
        raw = dig(r, "sequential", _middle(r), "ratio_to_raw")
        return check(f"x{raw:.2f} raw, x{versus:.2f} DBOS", raw >= 0.5 and versus >= 4)
    cpu = dig(r, "sequential", _middle(r), "cpu_ms_per_step")
    return check(f"x{versus:.2f} DBOS, {cpu:.3f} ms CPU", versus >= 5 and cpu <= 0.15)


def fleet(r: dict[str, Any]) -> str:
    return check(f"x{fleet_ratio(r):.2f} DBOS", fleet_ratio(r) >= 3)


def one_start(r: dict[str, Any]) -> str:
    start = dig(r, "starts", "start")
    figure = (
        f"{ms(start['median'])} ms = x{start['ratio_to_raw_commit']:.2f}, {start['statements']} st"
    )
    if not _postgresql(r):
        return f"{figure} (no target)"
    return check(figure, start["ratio_to_raw_commit"] <= 2 and start["statements"] <= 3)


def many_starts(r: dict[str, Any]) -> str:
    rate = dig(r, "starts", "start_many", "instances_per_second")
    try:
        versus = rate / dig(r, "peer", "starts", "starts_per_second")
    except Missing:
        versus = float("nan")
    # The absolute 5,000/s on PostgreSQL moved with the machine: issue 24 replaced it by a
    # ratio to a plain INSERT of the same rows (targets24.many_starts).
    return check(f"{rate:,.0f}/s, x{versus:.1f} DBOS", versus >= 10)


def bells(r: dict[str, Any]) -> str:
    backlog = dig(r, "starts", "bells")
    return check(
        f"{backlog['inversions']} inv, {backlog['drain_seconds']:.1f} s",
        backlog["inversions"] == 0,
    )


def admin_list(r: dict[str, Any]) -> str:
    admin = dig(r, "admin")
    every, running = admin["change_list"]["median"], admin["change_list_running"]["median"]
    figure = f"{ms(every)} / {ms(running)} ms at {admin['instances']:,}"
    return check(figure, every <= 0.3 and running <= 0.3 and admin["instances"] >= 1_000_000)


def admin_page(r: dict[str, Any]) -> str:
    admin = dig(r, "admin")
    return check(f"{ms(admin['change_page']['median'])} ms", admin["change_page"]["median"] <= 1)


def server_cost(r: dict[str, Any]) -> str:
    step, raw = dig(r, "wal", "run_step"), dig(r, "wal", "raw_commit")

    def cpu(figures: dict[str, Any]) -> str:
        value = figures["server_cpu_ms_each"]
        return "?" if value is None else f"{value:.3f}"

    return (
        f"{step['wal_bytes_each']:,.0f} B {cpu(step)} ms "
        f"({raw['wal_bytes_each']:,.0f} B {cpu(raw)} ms)"
    )


def targets_table(results: Results) -> Table:
    table = Table(results)
    table.header("Targets (issue 15)")
    rows = [
        (
            "sequential: PG >= 0.5 x raw and 4 x DBOS; SQLite 5 x DBOS, <= 0.15 ms CPU",
            sequential,
            "peer",
        ),
        ("fleet 1 cluster >= 3 x DBOS", fleet, "peer"),
        ("start(): median <= 2 x raw commit, <= 3 statements (PG)", one_start, "starts"),
        ("start_many: >= 10 x DBOS start_workflow loop", many_starts, "starts"),
        ("bells due at once: earliest first (0 inversions), drain", bells, "starts"),
        ("admin list at 1,000,000: <= 300 ms, all and by status", admin_list, "admin"),
        ("admin page of a 10,000-step instance <= 1 s", admin_page, "admin"),
        ("WAL bytes / server CPU per run step (raw commit)", server_cost, "wal"),
    ]
    for label, cell, scenario in rows:
        table.row(label, cell, scenario)
    return table
