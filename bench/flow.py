"""Scenario ``queue``, flow control: instances queued behind a concurrency limit drain, inline.

``queue_instances`` instances of ``bench-limited`` (``max_concurrency`` 10) are started with
random priorities; the first ten are admitted at once, the rest queue. Worker threads then
tick whatever is due until all have completed: each completion admits the next in its
transaction. Reported: admissions per second while draining, inversions (an instance
admitted before one that was queued ahead of it by priority and creation), double
admissions (an instance started twice), and the most instances holding a slot at once.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from django.db import connection
from django.db.models import Count

from django_workerflow import start
from django_workerflow.models import WorkflowEvent, WorkflowInstance
from django_workerflow.runtime.tick import tick
from django_workerflow.values.clock import now as clock_now
from django_workerflow.workers import bells

from .common import Sizes

LIMIT = 10


def queue_drain(sizes: Sizes) -> dict[str, Any]:
    rng = random.Random(20261201)
    count = sizes.queue_instances
    with bells.suppressed():
        started_at = time.monotonic()
        for index in range(count):
            start("bench-limited", key=f"queued-{index}", priority=rng.randint(0, 4))
        start_seconds = time.monotonic() - started_at
        queued = WorkflowInstance.objects.filter(
            definition_name="bench-limited", admitted_at__isnull=True
        ).count()
        began = time.monotonic()
        drain_from = clock_now()
        workers = [
            threading.Thread(target=_work, args=(count,)) for _ in range(sizes.queue_workers)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        seconds = time.monotonic() - began
    rows = list(
        WorkflowInstance.objects.filter(definition_name="bench-limited").values_list(
            "pk", "priority", "created_at", "admitted_at", "status"
        )
    )
    return {
        "instances": count,
        "limit": LIMIT,
        "workers": sizes.queue_workers,
        "queued": queued,
        "starts_per_second": count / start_seconds,
        "drain_seconds": seconds,
        "admissions_per_second": queued / seconds,
        "completed": sum(1 for row in rows if row[4] == "completed"),
        "inversions": _inversions(rows, drain_from),
        "double_admissions": _double_starts(),
        "max_holding": _max_holding(),
    }


def _work(total: int) -> None:
    """Tick due instances until every queued instance has completed."""
    try:
        with bells.suppressed():
            done = WorkflowInstance.objects.filter(
                definition_name="bench-limited", status="completed"
            )
            while done.count() < total:
                due = list(
                    WorkflowInstance.objects.due(clock_now()).values_list("pk", flat=True)[:LIMIT]
                )
                for pk in due:
                    tick(pk)
                if not due:
                    time.sleep(0.001)
    finally:
        connection.close()


def _inversions(rows: list[tuple], drain_from: Any) -> int:
    """Instances admitted after a queue-mate that should have come later. The ones admitted
    on start (a free slot, nothing queued yet) were never in the queue and are left out."""
    queued = [row for row in rows if row[3] >= drain_from]
    # Admission order: admission time, then queue order within one admitting transaction.
    by_admission = sorted(queued, key=lambda row: (row[3], row[1], row[2], row[0]))
    inversions = 0
    best_after: tuple | None = None
    for row in reversed(by_admission):
        key = (row[1], row[2], row[0])
        if best_after is not None and best_after < key:
            inversions += 1
        best_after = key if best_after is None else min(best_after, key)
    return inversions


def _double_starts() -> int:
    return (
        WorkflowEvent.objects.filter(type="started", instance__definition_name="bench-limited")
        .values("instance_id")
        .annotate(starts=Count("id"))
        .filter(starts__gt=1)
        .count()
    )


def _max_holding() -> int:
    """The most instances holding a slot at once, from the admission and finish times."""
    moments: list[tuple[Any, int]] = []
    for admitted, finished in WorkflowInstance.objects.filter(
        definition_name="bench-limited"
    ).values_list("admitted_at", "finished_at"):
        moments += [(admitted, 1), (finished, -1)]
    # At one instant a finish (-1) frees the slot its admission (+1) then takes.
    moments.sort(key=lambda moment: (moment[0], moment[1]))
    holding = peak = 0
    for _, change in moments:
        holding += change
        peak = max(peak, holding)
    return peak
