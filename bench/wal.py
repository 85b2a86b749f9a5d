"""Scenario 13 (issue 15, PostgreSQL): what one run step costs the server.

WAL bytes per step from ``pg_current_wal_lsn()`` before and after a sequential workflow, and
the server CPU per step: from ``pg_stat_statements`` when the extension is loaded, else from
the backend process's own CPU time in ``/proc`` (the server runs on this machine). The same
for one-row autocommit INSERTs (the raw commit) for comparison.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.db import connection

from .common import Sizes
from .inline import PROBE_TABLE, create_probe_table, drive, start_inline


def _lsn(cursor: Any) -> int:
    cursor.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
    return int(cursor.fetchone()[0])


def _backend_cpu(cursor: Any) -> float | None:
    """Seconds of CPU the server process serving this connection has used (None: unreadable)."""
    cursor.execute("SELECT pg_backend_pid()")
    stat = Path(f"/proc/{cursor.fetchone()[0]}/stat")
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(run: Any, count: int) -> dict[str, Any]:
    with connection.cursor() as cursor:
        lsn, cpu = _lsn(cursor), _backend_cpu(cursor)
        began = time.perf_counter()
        run()
        seconds = time.perf_counter() - began
        wal = _lsn(cursor) - lsn
        used = _backend_cpu(cursor)
    return {
        "count": count,
        "wal_bytes_each": wal / count,
        "server_cpu_ms_each": None if cpu is None or used is None else 1000 * (used - cpu) / count,
        "ms_each": 1000 * seconds / count,
    }


def wal(sizes: Sizes) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        return {"skipped": "PostgreSQL only"}
    create_probe_table()
    steps = sizes.profile_steps
    drive(start_inline("bench-steps", 20))  # warm: prepared statements
    pk = start_inline("bench-steps", steps)

    def inserts() -> None:
        with connection.cursor() as cursor:
            for value in range(steps):
                cursor.execute(f"INSERT INTO {PROBE_TABLE} (value) VALUES (%s)", [value])

    return {
        "run_step": _measure(lambda: drive(pk), steps),
        "raw_commit": _measure(inserts, steps),
    }
