"""The targets of issue 24 (reaction time with the default settings; what a step and a start
cost PostgreSQL), each printed PASS or MISS."""

from __future__ import annotations

from typing import Any

from .report import Missing, Results, Table, check, dig, ms

#: Kill to the next attempt, with the default settings (a 12 s lease, a sweep every 5 s).
KILL_TO_RETRY_SECONDS = 20.0


def kill_to_retry(r: dict[str, Any]) -> str:
    figures = dig(r, "recovery", "kill_to_retry")
    return check(
        f"{figures['median']:.1f} / {figures['max']:.1f} s",
        figures["max"] <= KILL_TO_RETRY_SECONDS,
    )


# Item 3 and 4: what a run step and a start cost PostgreSQL, each beside the raw commit (or
# the plain INSERT) measured in the same run.

#: A run step's WAL bytes and server CPU, at most these multiples of a raw one-row commit's.
STEP_WAL_TIMES_RAW = 2.5
STEP_CPU_TIMES_RAW = 2.0
#: Sequential steps/s at N = 1,000, at least this multiple of the raw commit rate.
STEP_RATE_TO_RAW = 0.5
#: start()'s median, at most this multiple of a raw commit's time.
START_TIMES_RAW = 2.0
#: start_many()'s rate, at least this multiple of a plain multi-row INSERT's.
START_MANY_TO_PLAIN = 0.5


def _postgresql_only(r: dict[str, Any]) -> None:
    if r.get("environment", {}).get("vendor") != "postgresql":
        raise Missing(("PostgreSQL only",))


def step_wal(r: dict[str, Any]) -> str:
    step, raw = dig(r, "wal", "run_step"), dig(r, "wal", "raw_commit")
    times = step["wal_bytes_each"] / raw["wal_bytes_each"]
    figure = f"{step['wal_bytes_each']:,.0f} / {raw['wal_bytes_each']:,.0f} B = x{times:.2f}"
    return check(figure, times <= STEP_WAL_TIMES_RAW)


def step_cpu(r: dict[str, Any]) -> str:
    step, raw = dig(r, "wal", "run_step"), dig(r, "wal", "raw_commit")
    if step["server_cpu_ms_each"] is None or raw["server_cpu_ms_each"] is None:
        return "? (the server's /proc is unreadable)"
    if not raw["server_cpu_ms_each"]:
        return "? (too few commits for the CPU clock's ticks)"
    times = step["server_cpu_ms_each"] / raw["server_cpu_ms_each"]
    figure = f"{step['server_cpu_ms_each']:.3f} / {raw['server_cpu_ms_each']:.3f} ms = x{times:.2f}"
    return check(figure, times <= STEP_CPU_TIMES_RAW)


def step_rate(r: dict[str, Any]) -> str:
    _postgresql_only(r)
    ratio = dig(r, "sequential", "1000", "ratio_to_raw")
    return check(f"x{ratio:.2f}", ratio >= STEP_RATE_TO_RAW)


def one_start(r: dict[str, Any]) -> str:
    _postgresql_only(r)
    start = dig(r, "starts", "start")
    figure = f"{ms(start['median'])} ms = x{start['ratio_to_raw_commit']:.2f}"
    return check(figure, start["ratio_to_raw_commit"] <= START_TIMES_RAW)


def many_starts(r: dict[str, Any]) -> str:
    _postgresql_only(r)
    ratio = dig(r, "starts", "start_many", "ratio_to_plain_insert")
    ours = dig(r, "starts", "start_many", "instances_per_second")
    plain = dig(r, "starts", "start_many", "plain_insert_per_second")
    figure = f"{ours:,.0f} / {plain:,.0f}/s = x{ratio:.2f}"
    return check(figure, ratio >= START_MANY_TO_PLAIN)


def cost_rows(table: Table) -> None:
    """Items 3 and 4: a run step's and a start's cost, against the raw commit."""
    table.row("run step WAL <= 2.5 x raw commit's (PG)", step_wal, "wal")
    table.row("run step server CPU <= 2 x raw commit's (PG)", step_cpu, "wal")
    table.row("steps/s >= 0.5 x raw commit rate, N=1,000 (PG)", step_rate, "sequential")
    table.row("start(): median <= 2 x raw commit (PG)", one_start, "starts")
    table.row(
        "start_many(): >= 0.5 x plain multi-row INSERT of the same rows (PG)",
        many_starts,
        "starts",
    )


def targets_table(results: Results) -> Table:
    table = Table(results)
    table.header("Targets (issue 24)")
    table.row(
        "kill -> next attempt, defaults: median / max <= 20 s",
        kill_to_retry,
        "recovery",
    )
    wake_up_rows(table)
    cost_rows(table)
    return table


# Item 1: wake-ups without polling (PostgreSQL) ------------------------------------------

#: Timer lateness before LISTEN/NOTIFY, one cluster polling every 0.05 s on our machine
#: (median / p99 of 100 sleeps and 20 retries, load 1.5 to 2.3): the wake-ups may not make it
#: worse.
TIMER_LATENESS_BEFORE = (0.030, 0.064)


def _postgres_only(r: dict[str, Any]) -> str | None:
    return None if dig(r, "environment", "vendor") == "postgresql" else "- (PostgreSQL)"


def _latency(r: dict[str, Any], key: str) -> dict[str, Any]:
    figures: dict[str, Any] = dig(r, "clusters", "latency", key)
    return figures


def event_wake_up(r: dict[str, Any]) -> str:
    figures = _latency(r, "event_to_resume")
    return _postgres_only(r) or check(
        f"{ms(figures['median'])} / {ms(figures['p99'])} ms",
        figures["median"] <= 0.010 and figures["p99"] <= 0.050,
    )


def start_wake_up(r: dict[str, Any]) -> str:
    figures = _latency(r, "start_to_first_step")
    return _postgres_only(r) or check(f"{ms(figures['median'])} ms", figures["median"] <= 0.010)


def timer_lateness(r: dict[str, Any]) -> str:
    figures = _latency(r, "timer_lateness")
    median, p99 = TIMER_LATENESS_BEFORE
    return check(
        f"{ms(figures['median'])} / {ms(figures['p99'])} ms, {figures['early']} early",
        figures["median"] <= median and figures["p99"] <= p99 and figures["early"] == 0,
    )


def idle_queries(clusters: str) -> Any:
    def cell(r: dict[str, Any]) -> str:
        figures = dig(r, "clusters", "idle", clusters)
        return _postgres_only(r) or check(
            f"{figures['per_cluster_per_second']:.2f}/s",
            figures["per_cluster_per_second"] <= 1.0,
        )

    return cell


def wake_up_rows(table: Table) -> None:
    """Issue 24 item 1: one cluster on PostgreSQL, woken by notifications."""
    table.row(
        "send_event -> next step started: median <= 10 ms, p99 <= 50 ms (PG)",
        event_wake_up,
        "clusters",
    )
    table.row("start -> first step started: median <= 10 ms (PG)", start_wake_up, "clusters")
    median, p99 = TIMER_LATENESS_BEFORE
    table.row(
        f"timer lateness: median <= {ms(median)} ms, p99 <= {ms(p99)} ms (polling's), 0 early",
        timer_lateness,
        "clusters",
    )
    for clusters in ("1", "4"):
        table.row(
            f"idle: transactions per second per cluster, {clusters} cluster(s) <= 1 (PG)",
            idle_queries(clusters),
            "clusters",
        )
