"""The process metrics rows: flushing this process's
:data:`~django_workerflow.meters.METERS` to its row, retiring the rows of processes gone
quiet, and reading every process's totals for a scrape.

A flush writes the process's cumulative totals over its own row (one ``UPDATE``, or an
``INSERT`` the first time), at most every ``WORKERFLOW_SWEEP_SECONDS`` and only after
something was observed: the worker tasks call :func:`flush_if_due` after each tick and
each sweep, never inside a tick's transactions.

A process that stops (django-q2 recycles its workers every few hundred tasks) leaves its
row, and its counts must stay in the counters. So that the rows do not pile up, the
sweeper merges the rows not flushed for :func:`retire_after` into one retired row
(:data:`RETIRED`) and deletes them, under their row locks. A live process whose row was
retired (it was idle) finds its row gone at its next flush: it then knows the totals it
last flushed are in the retired row, and from then on writes only what it observed since
(:attr:`~django_workerflow.meters.Meters.retired`). Nothing is counted twice or lost,
whichever of the flush and the merge takes the row lock first.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from django_workerflow.conf import settings
from django_workerflow.meters import METERS, Sums, Totals, difference
from django_workerflow.models import ProcessMetrics

logger = logging.getLogger(__name__)

#: The row that holds the merged totals of the retired rows.
RETIRED = uuid.UUID(int=0)


def retire_after() -> timedelta:
    """How long a row goes unflushed before the sweeper merges it into the retired row."""
    return timedelta(seconds=max(60.0, 10 * settings.SWEEP_SECONDS))


def flush_if_due() -> bool:
    """Flush if something was observed since the last flush and that flush is older than
    ``WORKERFLOW_SWEEP_SECONDS``. A database error is logged, not raised: the totals stay
    in memory for the next flush. True if the row was written."""
    if not METERS.unflushed:
        return False
    last = METERS.flushed_at
    if last is not None and time.monotonic() - last < settings.SWEEP_SECONDS:
        return False
    try:
        flush()
    except DatabaseError:
        logger.warning("metrics flush failed process=%s", METERS.process, exc_info=True)
        return False
    return True


def flush() -> None:
    """Write this process's totals (less what the retired row holds of them) over its row."""
    observed = METERS.unflushed
    totals = METERS.totals()
    values: dict[str, Any] = {"flushed_at": timezone.now()}
    with transaction.atomic():
        values["totals"] = difference(totals, METERS.retired)
        updated = ProcessMetrics.objects.filter(process=METERS.process).update(**values)
        if not updated:
            if METERS.flushed_at is not None:
                # The sweeper retired the row: what it held is in the retired row now.
                METERS.retired = METERS.last_flushed
                values["totals"] = difference(totals, METERS.retired)
            ProcessMetrics.objects.create(
                process=METERS.process, host=METERS.host[:255], pid=METERS.pid, **values
            )
    METERS.flushed(time.monotonic(), observed, totals)


def retire(now: datetime | None = None) -> int:
    """Merge the rows not flushed for :func:`retire_after` into the retired row and delete
    them; return how many. The sweeper calls it (skipping rows a flush holds)."""
    with transaction.atomic():
        quiet = list(quiet_rows(now).select_for_update(skip_locked=True))
        if not quiet:
            return 0
        retired, _ = ProcessMetrics.objects.select_for_update().get_or_create(
            process=RETIRED,
            defaults={"host": "", "pid": 0, "flushed_at": timezone.now(), "totals": {}},
        )
        sums = Sums().add(retired.totals)
        for row in quiet:
            sums.add(row.totals)
        retired.totals = sums.totals()
        retired.flushed_at = timezone.now()
        retired.save(update_fields=["totals", "flushed_at"])
        ProcessMetrics.objects.filter(pk__in=[row.pk for row in quiet]).delete()
    return len(quiet)


def quiet_rows(now: datetime | None = None) -> QuerySet[ProcessMetrics]:
    """The rows :func:`retire` merges at ``now`` (the sweeper's probe asks if any exists)."""
    cutoff = (now or timezone.now()) - retire_after()
    return ProcessMetrics.objects.filter(flushed_at__lt=cutoff).exclude(process=RETIRED)


def fleet_totals() -> list[Totals]:
    """Every process's totals: the rows of the others (the retired row included), and this
    process's own totals from memory in place of its row (which may lag them), less what
    the retired row holds of them, so nothing counts twice."""
    rows = list(ProcessMetrics.objects.values_list("process", "totals"))
    others = [totals for process, totals in rows if process != METERS.process]
    retired = METERS.retired
    if METERS.flushed_at is not None and len(others) == len(rows):
        retired = METERS.last_flushed  # retired since its last flush, which will learn it
    return [*others, difference(METERS.totals(), retired)]
