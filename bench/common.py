"""What every scenario shares: sizes, statistics, waiting, and the database being measured."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PG_CONNECT = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}


@dataclass(frozen=True)
class Sizes:
    """How much work each scenario does: the full suite, or the smoke mode's tiny sizes."""

    # 1. Sequential: workflow sizes, and how many runs of each (the median is reported).
    sequential: dict[int, int] = field(default_factory=lambda: {100: 15, 1_000: 5, 10_000: 3})
    # Seconds of one-row autocommit INSERTs measured right before and after each run.
    commit_probe_seconds: float = 0.3
    # 2. Replay: recorded run steps, and how many replaying ticks are timed.
    replay_steps: int = 1_000
    replay_repeats: int = 7
    # 3. Statements: the two workflow sizes whose difference is the cost of one step.
    statement_sizes: tuple[int, int] = (10, 60)
    # 4. Fleet: instances x run steps, measured with 1..fleet_clusters clusters.
    fleet_instances: int = 500
    fleet_steps: int = 10
    fleet_clusters: int = 2
    # 5. Latency: sleeps (spread over sleep_range seconds) and 250 ms retries started at
    # `start_rate` per second, then events and starts one every `spacing` seconds.
    sleeps: int = 100
    sleep_range: tuple[float, float] = (0.5, 3.0)
    retries: int = 20
    start_rate: float = 10.0
    events: int = 50
    starts: int = 50
    spacing: float = 0.1
    # Idle cost: seconds of counting the database's transactions with 1, then with
    # `idle_clusters` clusters running and nothing to do.
    idle_seconds: float = 60.0
    idle_clusters: int = 4
    # 6. Scale: sleeping instances, how many of them are due, and timed repeats.
    scale_instances: int = 100_000
    scale_due: int = 100
    due_repeats: int = 21
    sweep_repeats: int = 5
    # 7. Peer: the same sequential and fleet workloads; `peer_repeats` alternating runs.
    peer_steps: int = 1_000
    peer_repeats: int = 5
    # Profile of the sequential hot path (pyinstrument).
    profile_steps: int = 2_000
    # 9. Deploy safety: instances check-replay replays, and workers killed mid-step.
    check_replay_instances: int = 1_000
    kills: int = 5
    # 10. Queue: instances queued behind a limit of 10, drained by this many worker threads.
    queue_instances: int = 10_000
    queue_workers: int = 4
    # 11. Starts: timed start() calls, start_many() instances, bells due at once.
    starts_timed: int = 500
    start_many: int = 10_000
    bells: int = 10_000
    # 12. Admin (PostgreSQL): instances in the table, steps of the instance whose page is
    # opened, timed page loads.
    admin_instances: int = 1_000_000
    admin_steps: int = 10_000
    admin_repeats: int = 5
    # 15. Metrics (PostgreSQL): instances in the table, process metrics rows, timed scrapes.
    metrics_instances: int = 1_000_000
    metrics_processes: int = 50
    metrics_repeats: int = 20
    # 14. Tasks: django.tasks enqueued one at a time (start latency), then released at once
    # in one transaction (drained by one cluster, or as many django-tasks-db workers).
    task_latency: int = 100
    task_spacing: float = 0.05
    task_drain: int = 2_000
    # 41. Step timeouts: run steps per instance, and rounds of the interleaved variants.
    timeout_steps: int = 400
    timeout_rounds: int = 25


FULL = Sizes()
SMOKE = Sizes(
    sequential={10: 1, 20: 1, 50: 1},
    commit_probe_seconds=0.05,
    replay_steps=20,
    replay_repeats=2,
    fleet_instances=10,
    fleet_steps=3,
    sleeps=4,
    sleep_range=(0.2, 0.6),
    retries=2,
    start_rate=20.0,
    events=3,
    starts=3,
    spacing=0.05,
    idle_seconds=3.0,
    scale_instances=1_000,
    scale_due=10,
    due_repeats=3,
    sweep_repeats=2,
    peer_steps=20,
    peer_repeats=1,
    profile_steps=50,
    check_replay_instances=20,
    kills=1,
    queue_instances=100,
    starts_timed=20,
    start_many=200,
    bells=200,
    admin_instances=2_000,
    admin_steps=50,
    admin_repeats=2,
    metrics_instances=2_000,
    metrics_processes=10,
    metrics_repeats=3,
    task_latency=3,
    task_drain=10,
    timeout_steps=20,
    timeout_rounds=3,
)


# Statistics ---------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile: with fewer than 100 values, p99 is the maximum."""
    ordered = sorted(values)
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def distribution(values: list[float]) -> dict[str, Any]:
    """min, median, p99, max (seconds) and how many were negative (early)."""
    return {
        "count": len(values),
        "min": min(values),
        "median": statistics.median(values),
        "p99": percentile(values, 0.99),
        "max": max(values),
        "early": sum(value < 0 for value in values),
    }


class Stopwatch:
    """Wall and CPU time of a block: ``with Stopwatch() as watch: ...; watch.seconds``."""

    def __enter__(self) -> Stopwatch:
        self._wall = time.perf_counter()
        self._cpu = time.process_time()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.perf_counter() - self._wall
        self.cpu_seconds = time.process_time() - self._cpu


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` takes."""
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def wait_until(
    predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05
) -> Any:
    """Poll ``predicate`` every ``interval`` seconds until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"Timed out after {timeout} s waiting for {what}.")
        time.sleep(interval)


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (other sessions share it)."""
    return [round(value, 2) for value in os.getloadavg()]


# PostgreSQL databases -----------------------------------------------------------------


def postgres_reachable() -> str | None:
    """None if the server answers, else why not."""
    import psycopg

    try:
        psycopg.connect(dbname="postgres", connect_timeout=5, **PG_CONNECT).close()
    except psycopg.Error as exc:
        return str(exc).strip()
    return None


def recreate_postgres_database(name: str) -> None:
    """Drop ``name`` (closing its connections) and create it empty."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dbname="postgres", autocommit=True, **PG_CONNECT) as conn:
        identifier = sql.Identifier(name)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(identifier))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(identifier))


def drop_postgres_database(name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dbname="postgres", autocommit=True, **PG_CONNECT) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def postgres_version() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        return cursor.fetchone()[0]
