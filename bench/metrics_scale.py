"""Scenario ``metrics``: the cost of a Prometheus scrape over a large table (PostgreSQL).

``metrics_instances`` instances of four definitions are written with the admin scenario's
``INSERT ... SELECT generate_series`` (:func:`.admin_scale.fill_instances`), 95 % of them
finished (completed, some failed) and 5 % active (running and pending), and
``metrics_processes`` process metrics rows, each with every counter and histogram series
of the four definitions: the live workers of a few clusters and those stopped in the last
minute (the sweeper merges the rows of older ones into one, ``store/flushed_totals.py``).
Then ``metrics.text()`` (what the view answers) is timed ``metrics_repeats`` times with
the rows unchanged, then as many times with every row flushed again before each scrape
(live workers flush every few seconds), and the queries of one more scrape are timed each.
The tables are emptied afterwards.
"""

from __future__ import annotations

import gc
import statistics
import time
import uuid
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_workerflow import metrics
from django_workerflow.models import ProcessMetrics, WorkflowInstance
from django_workerflow.process_counters import ProcessCounters
from django_workerflow.values.states import AttemptEnding, StepType, WakeCause

from .admin_scale import DEFINITIONS, fill_instances
from .common import Sizes, percentile

#: 95 % finished, 5 % active: a fleet that keeps its history for a while.
STATUSES = ("completed",) * 36 + ("failed",) * 2 + ("running", "pending")
FINISHED = 38


def _process_totals() -> dict[str, Any]:
    """The totals of a process that saw every series of the four definitions."""
    process_counters = ProcessCounters()
    for index in range(DEFINITIONS):
        name = f"bench-admin-{index}"
        process_counters.attempt_started(name, StepType.RUN)
        for outcome in AttemptEnding:
            process_counters.attempt_finished(name, StepType.RUN, outcome, 0.01 * (index + 1))
        process_counters.tick_finished(name, 0.02)
        for cause in WakeCause:
            process_counters.woke(name, cause, 0.1)
    return process_counters.totals()


def _fill_processes(count: int) -> None:
    totals = _process_totals()
    now = timezone.now()
    ProcessMetrics.objects.bulk_create(
        ProcessMetrics(
            process=uuid.uuid4(),
            host=f"worker-{index % 8}",
            pid=index,
            flushed_at=now,
            totals=totals,
        )
        for index in range(count)
    )


def _timed(repeats: int, reflushed: bool = False) -> list[float]:
    """Seconds of each of ``repeats`` scrapes; ``reflushed``: every process row flushed
    again before each (a fleet of live workers, which flush every few seconds, between two
    scrapes), else unchanged (stopped processes, the retired row)."""
    metrics.text()  # warm: plans, the registry's lookups
    timings = []
    for _ in range(repeats):
        if reflushed:
            ProcessMetrics.objects.update(flushed_at=timezone.now())
        began = time.perf_counter()
        metrics.text()
        timings.append(time.perf_counter() - began)
    return timings


def _queries() -> list[tuple[float, str]]:
    """Each query of one scrape: its seconds and the start of its text, slowest first."""
    with CaptureQueriesContext(connection) as captured:
        metrics.text()
    timed = [(float(query["time"]), query["sql"][:90]) for query in captured.captured_queries]
    return sorted(timed, reverse=True)


def metrics_scale(sizes: Sizes, progress: Any) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        return {"skipped": "measured on PostgreSQL"}
    progress(f"metrics: {sizes.metrics_instances:,} instances")
    began = time.perf_counter()
    fill_instances(sizes.metrics_instances, STATUSES, FINISHED)
    _fill_processes(sizes.metrics_processes)
    with connection.cursor() as cursor:
        # As autovacuum leaves a table that is read more than written: an index-only scan
        # needs the visibility map.
        cursor.execute(f"VACUUM ANALYZE {WorkflowInstance._meta.db_table}")
    fill_seconds = time.perf_counter() - began
    try:
        timings = _timed(sizes.metrics_repeats)
        collections = gc.get_stats()[-1]["collections"]
        reflushed = _timed(sizes.metrics_repeats, reflushed=True)
        # Full garbage collections while the reflushed scrapes ran (their updates too):
        # what makes their p99.
        collections = gc.get_stats()[-1]["collections"] - collections
        return {
            "instances": WorkflowInstance.objects.count(),
            "processes": ProcessMetrics.objects.count(),
            "fill_seconds": fill_seconds,
            "median": statistics.median(timings),
            "p99": percentile(timings, 0.99),
            "repeats": len(timings),
            "reflushed_median": statistics.median(reflushed),
            "reflushed_p99": percentile(reflushed, 0.99),
            "reflushed_full_collections": collections,
            "queries": _queries(),
            "bytes": len(metrics.text()),
        }
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {WorkflowInstance._meta.db_table} CASCADE")
            cursor.execute(f"TRUNCATE {ProcessMetrics._meta.db_table}")
