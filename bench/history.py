"""Scenario ``history``: what the complete ``StepEvent`` costs.

WAL: a run step's WAL bytes beside a raw one-row commit's whose row carries a 64-byte
payload (an autocommit INSERT), in alternating windows as scenario ``wal`` measures them
(PostgreSQL only). Two counts: the server's WAL position moved (scenario ``wal``'s figure, which
also counts whatever other sessions wrote meanwhile), and the records of this database's
transactions alone, read back with ``pg_walinspect`` (the medians of the windows).

Read: one instance's history of 1,000 run steps (2,000 events, all kept on the steps' rows)
read through the model (the view: one query) and through the merge that ``step_events_of()``
did before it (two queries and a merge in Python), each timed and its queries counted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_workerflow.models import StepEvent
from tests.models.step_history_oracle import old_step_events_of

from .common import Sizes
from .inline import drive, start_inline
from .wal import WINDOWS

#: The raw commit's table: a 64-byte payload per row.
PAYLOAD_TABLE = "bench_commit_probe_64"
PAYLOAD = "x" * 64
#: The history read: run steps in the instance, and timed reads of each kind.
HISTORY_STEPS = 1_000
READS = 7


def history(sizes: Sizes) -> dict[str, Any]:
    return {"wal": _wal(sizes), "read": _read(sizes)}


def _wal(sizes: Sizes) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        return {"skipped": "PostgreSQL only"}
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {PAYLOAD_TABLE} (id bigserial PRIMARY KEY, payload text)"
        )
        cursor.execute("CHECKPOINT")  # see bench.wal: full-page images outside the windows
    each = max(1, sizes.profile_steps // WINDOWS)

    def inserts(count: int = each) -> None:
        with connection.cursor() as cursor:
            for _ in range(count):
                cursor.execute(f"INSERT INTO {PAYLOAD_TABLE} (payload) VALUES (%s)", [PAYLOAD])

    drive(start_inline("bench-steps", 20))
    inserts(20)
    pks = [start_inline("bench-steps", each) for _window_number in range(WINDOWS)]
    steps, raw = [], []
    with connection.cursor() as cursor:
        for pk in pks:
            steps.append(_measured(cursor, lambda pk=pk: drive(pk)))
            raw.append(_measured(cursor, inserts))
    run_step, raw_commit = _per_item(steps, each), _per_item(raw, each)
    return {
        "run_step": run_step,
        "raw_commit_64": raw_commit,
        "times_raw": run_step["own_wal_bytes_each"] / raw_commit["own_wal_bytes_each"],
        "times_raw_server": run_step["wal_bytes_each"] / raw_commit["wal_bytes_each"],
    }


def _measured(cursor: Any, run: Callable[[], Any]) -> tuple[int, int]:
    """(The WAL position's move, the bytes of this database's records) over one ``run``."""
    cursor.execute("SELECT pg_current_wal_flush_lsn()::text")
    start = cursor.fetchone()[0]
    run()
    cursor.execute("SELECT pg_current_wal_flush_lsn()::text")
    end = cursor.fetchone()[0]
    cursor.execute(OWN_WAL, {"start": start, "end": end, "database": _database_pattern(cursor)})
    moved, own = cursor.fetchone()
    return int(moved), int(own)


#: The bytes of the WAL records between two positions that touch this database's relations,
#: and of the other records (the commits) of the transactions that wrote them; each record
#: padded to 8 bytes as the WAL lays it out.
OWN_WAL = """
    WITH records AS (
        SELECT xid, record_length, block_ref
        FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
    ), ours AS (
        SELECT DISTINCT xid FROM records WHERE block_ref LIKE %(database)s AND xid <> 0
    )
    SELECT %(end)s::pg_lsn - %(start)s::pg_lsn, coalesce(sum((record_length + 7) / 8 * 8), 0)
    FROM records
    WHERE block_ref LIKE %(database)s OR xid IN (SELECT xid FROM ours)"""


def _database_pattern(cursor: Any) -> str:
    cursor.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
    return f"% rel %/{cursor.fetchone()[0]}/%"


def _per_item(windows: list[tuple[int, int]], each: int) -> dict[str, Any]:
    return {
        "count": each * len(windows),
        "wal_bytes_each": statistics.median(moved for moved, _own in windows) / each,
        "own_wal_bytes_each": statistics.median(own for _moved, own in windows) / each,
    }


def _read(sizes: Sizes) -> dict[str, Any]:
    steps = min(HISTORY_STEPS, sizes.replay_steps)
    pk = start_inline("bench-steps", steps)
    drive(pk)
    view = _timed(lambda: list(StepEvent.objects.filter(instance_id=pk).select_related("step")))
    merge = _timed(lambda: old_step_events_of(pk))
    return {"steps": steps, "events": view.pop("rows"), "view": view, "merge": merge}


def _timed(read: Callable[[], list[Any]]) -> dict[str, Any]:
    """The read's median, min and max milliseconds over READS runs, its queries and rows."""
    read()  # warm
    times = []
    for _ in range(READS):
        with CaptureQueriesContext(connection) as queries:
            began = time.perf_counter()
            rows = read()
            times.append(1000 * (time.perf_counter() - began))
    return {
        "ms_median": statistics.median(times),
        "ms_min": min(times),
        "ms_max": max(times),
        "queries": len(queries),
        "rows": len(rows),
    }
