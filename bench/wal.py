"""Scenario ``wal`` (PostgreSQL): what one run step costs the server.

WAL bytes per step from ``pg_current_wal_lsn()`` around sequential workflows (the median of
:data:`WINDOWS` windows, alternating with windows of raw commits), and the server CPU per
step from the backend process's own CPU time in ``/proc`` (the server runs on this
machine). The same for one-row autocommit INSERTs (the raw commit) for comparison.
"""

from __future__ import annotations

import os
import statistics
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


#: The run steps (and raw commits) are measured in this many alternating windows: the WAL
#: position is the server's, so another session's writes land in whichever window they
#: fall in, and the median window leaves a burst out.
WINDOWS = 10


def _window(cursor: Any, run: Any) -> tuple[int, float | None, float]:
    """(WAL bytes, server CPU seconds or None, wall seconds) of one call of ``run``."""
    lsn, cpu = _lsn(cursor), _backend_cpu(cursor)
    began = time.perf_counter()
    run()
    seconds = time.perf_counter() - began
    wal_bytes = _lsn(cursor) - lsn
    used = _backend_cpu(cursor)
    return wal_bytes, None if cpu is None or used is None else used - cpu, seconds


def _figures(windows: list[tuple[int, float | None, float]], each: int) -> dict[str, Any]:
    """Per item: the median window's WAL bytes; the CPU and wall time of all windows (the
    CPU clock ticks every 10 ms, too coarse for one window)."""
    count = each * len(windows)
    cpus = [cpu for _wal, cpu, _seconds in windows if cpu is not None]
    return {
        "count": count,
        "wal_bytes_each": statistics.median(wal for wal, _cpu, _seconds in windows) / each,
        "server_cpu_ms_each": 1000 * sum(cpus) / count if len(cpus) == len(windows) else None,
        "ms_each": 1000 * sum(seconds for _wal, _cpu, seconds in windows) / count,
    }


def wal(sizes: Sizes) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        return {"skipped": "PostgreSQL only"}
    create_probe_table()
    each = max(1, sizes.profile_steps // WINDOWS)

    def inserts(count: int = each) -> None:
        with connection.cursor() as cursor:
            for value in range(count):
                cursor.execute(f"INSERT INTO {PROBE_TABLE} (value) VALUES (%s)", [value])

    with connection.cursor() as cursor:
        # The first change to a page after a checkpoint logs the whole page: a checkpoint
        # that fell among the windows put full-page images in some of them, of either kind,
        # at random (once 1,528 B a step against 851 B a raw commit, a ratio that passed).
        # Checkpointing first keeps the next one checkpoint_timeout away, and the warm-up
        # below pays the pages' images outside the windows.
        cursor.execute("CHECKPOINT")
    drive(start_inline("bench-steps", 20))  # warm: prepared statements, the pages' images
    inserts(20)
    pks = [start_inline("bench-steps", each) for _window_number in range(WINDOWS)]

    steps, raw = [], []
    with connection.cursor() as cursor:
        for pk in pks:  # each window drives one workflow of ``each`` steps to its end
            steps.append(_window(cursor, lambda pk=pk: drive(pk)))
            raw.append(_window(cursor, inserts))
    return {"run_step": _figures(steps, each), "raw_commit": _figures(raw, each)}
