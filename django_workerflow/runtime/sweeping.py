"""The sweeper's pass: :func:`sweep` rings the bells that are missing.

Overdue active instances (a lost bell, or a worker that died holding the lease) are rung
now; alarms coming due within the bell horizon get their precise bell if none is queued
yet. :func:`alarms_by` tells the sweeper's schedule whether to keep its fast pace.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q, QuerySet

from django_workerflow.models import WorkflowInstance
from django_workerflow.store import locks
from django_workerflow.values.clock import now as clock_now
from django_workerflow.workers import bells

__all__ = ["SWEEP_GRACE", "SWEEP_RERING", "alarms_by", "sweep", "sweep_backlog"]

logger = logging.getLogger(__name__)

# An alarm this far overdue has lost its bell (or its worker): the sweeper rings it again.
SWEEP_GRACE = timedelta(seconds=15)
# How long the sweeper waits before ringing the same overdue instance again.
SWEEP_RERING = timedelta(minutes=2)


def sweep(*, limit: int = 1000) -> int:
    """Ring the bells that are missing; return how many rang. Safe to run concurrently.

    Overdue active instances (a lost bell, or a worker that died holding the lease: its
    lease expiry is the alarm) are rung now; alarms coming due within the bell horizon get
    their precise bell if none is queued for that time yet. The earliest ``limit`` of each
    are rung, :data:`~django_workerflow.store.locks.HOUSEKEEPING_BATCH` per short
    transaction: each takes its rows in primary-key order and skips those another
    transaction holds (their tick or verb is at work on them; the next sweep sees them).
    """
    now = clock_now()
    overdue_rows, upcoming_rows = sweep_backlog(now)
    overdue = list(overdue_rows.order_by("alarm_at").values_list("pk", flat=True)[:limit])
    upcoming = list(upcoming_rows.order_by("alarm_at").values_list("pk", flat=True)[:limit])
    rang_overdue = _ring_in_batches(overdue_rows, overdue, now)
    rang_upcoming = _ring_in_batches(upcoming_rows, upcoming, None)
    # Overdue instances mean a lost bell or a dead worker: worth a line. Bells queued for
    # alarms coming near are routine (every long sleep gets one), so DEBUG.
    if rang_overdue or rang_upcoming:
        logger.log(
            logging.INFO if rang_overdue else logging.DEBUG,
            "sweep overdue=%s upcoming=%s",
            rang_overdue,
            rang_upcoming,
        )
    return rang_overdue + rang_upcoming


def _ring_in_batches(
    rows: QuerySet[WorkflowInstance], pks: list[int], when: datetime | None
) -> int:
    """Ring the bell of each of ``pks`` still in ``rows`` (at ``when``, or at its alarm
    when None), a short transaction per batch; how many rang."""
    rang = 0
    for first in range(0, len(pks), locks.HOUSEKEEPING_BATCH):
        with transaction.atomic():
            taken = locks.take_unlocked(rows, pks[first : first + locks.HOUSEKEEPING_BATCH])
            for pk, alarm_at in taken:
                due = when or alarm_at
                if due is not None:  # an upcoming alarm is set (filtered): this tells mypy
                    bells.arm(pk, due)
        rang += len(taken)
    return rang


def sweep_backlog(now: datetime) -> tuple[QuerySet[WorkflowInstance], QuerySet[WorkflowInstance]]:
    """What :func:`sweep` rings at ``now``: the overdue instances and those whose alarm comes
    within the bell horizon without its bell (the sweeper's probe asks if either exists)."""
    # A paused definition's instances are held: no bell for them until it is resumed.
    active = WorkflowInstance.objects.active().unheld()
    overdue = active.filter(alarm_at__lte=now - SWEEP_GRACE).filter(
        # Not again while the sweep's own bell may still be waiting in a busy queue.
        Q(bell_at__isnull=True) | Q(bell_at__lte=F("alarm_at")) | Q(bell_at__lte=now - SWEEP_RERING)
    )
    upcoming = (
        active.filter(alarm_at__gt=now - SWEEP_GRACE, alarm_at__lte=now + bells.HORIZON)
        .exclude(bell_at=F("alarm_at"))
        # A leased instance's alarm is its lease expiry: its tick is still at work.
        .exclude(lease_expires_at__gt=now)
    )
    return overdue, upcoming


def alarms_by(until: datetime) -> QuerySet[WorkflowInstance]:
    """The active instances whose alarm (a lease expiry, a timer, a wait's deadline) comes
    by ``until``: while any exists the sweeper keeps its fast pace, as a worker that dies
    holding a lease is found by the first sweep after its expiry."""
    return WorkflowInstance.objects.active().unheld().filter(alarm_at__lte=until)
