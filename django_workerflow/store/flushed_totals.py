"""The flushed totals rows (``ProcessMetrics``): flushing this process's
:data:`~django_workerflow.process_counters.PROCESS_COUNTERS` to its row, retiring the rows
of processes gone quiet, and reading every process's totals for a scrape.

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
(:attr:`~django_workerflow.process_counters.ProcessCounters.retired`). Nothing is counted
twice or lost, whichever of the flush and the merge takes the row lock first.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Case, Q, QuerySet, TextField, When
from django.db.models.functions import Cast
from django.utils import timezone

from django_workerflow.conf import settings
from django_workerflow.models import ProcessMetrics
from django_workerflow.process_counters import (
    EMPTY,
    PROCESS_COUNTERS,
    Flat,
    Series,
    Sums,
    Totals,
    difference,
    flattened,
    plus,
    summed_flat,
)

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
    if not PROCESS_COUNTERS.unflushed:
        return False
    last = PROCESS_COUNTERS.flushed_at
    if last is not None and time.monotonic() - last < settings.SWEEP_SECONDS:
        return False
    try:
        flush()
    except DatabaseError:
        logger.warning("metrics flush failed process=%s", PROCESS_COUNTERS.process, exc_info=True)
        return False
    return True


def flush() -> None:
    """Write this process's totals (less what the retired row holds of them) over its row."""
    observed = PROCESS_COUNTERS.unflushed
    totals = PROCESS_COUNTERS.totals()
    values: dict[str, Any] = {"flushed_at": timezone.now()}
    with transaction.atomic():
        values["totals"] = difference(totals, PROCESS_COUNTERS.retired)
        updated = ProcessMetrics.objects.filter(process=PROCESS_COUNTERS.process).update(**values)
        if not updated:
            if PROCESS_COUNTERS.flushed_at is not None:
                # The sweeper retired the row: what it held is in the retired row now.
                PROCESS_COUNTERS.retired = PROCESS_COUNTERS.last_flushed
                values["totals"] = difference(totals, PROCESS_COUNTERS.retired)
            ProcessMetrics.objects.create(
                process=PROCESS_COUNTERS.process,
                host=PROCESS_COUNTERS.host[:255],
                pid=PROCESS_COUNTERS.pid,
                **values,
            )
    PROCESS_COUNTERS.flushed(time.monotonic(), observed, totals)


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


def own_totals(own_row: bool) -> Totals:
    """This process's totals from memory, less what the retired row holds of them;
    ``own_row``: whether its row is still there (else the sweeper retired it since its
    last flush, which will learn it, and the retired row holds what it flushed)."""
    retired = PROCESS_COUNTERS.retired
    if PROCESS_COUNTERS.flushed_at is not None and not own_row:
        retired = PROCESS_COUNTERS.last_flushed
    return difference(PROCESS_COUNTERS.totals(), retired)


def fleet_series() -> Series:
    """Every process's totals summed: the rows of the others (the retired row included)
    from :data:`FLEET`, re-read only where they changed, and this process's own totals from
    memory in place of its row (which may lag them), so nothing counts twice."""
    fleet = FLEET.read(PROCESS_COUNTERS.process)
    own = own_totals(fleet.own_row)
    if not any(own["counters"].values()) and not any(own["histograms"].values()):
        return fleet.summed
    return FLEET.with_own(fleet.summed, own)


@dataclass(frozen=True)
class FleetRead:
    """What :meth:`Fleet.read` found: the other processes' totals summed, and whether the
    reading process's own row is there."""

    summed: Series
    own_row: bool


class Fleet:
    """The other processes' rows, decoded and summed, kept between scrapes by ``(process,
    flushed_at)``: every flush and every merge into the retired row writes a new
    ``flushed_at``, so a row whose pair is kept holds the totals kept.

    A scrape reads every row's pair in one statement (one snapshot: nothing counted twice
    or missed while the sweeper retires rows), with the totals of the rows flushed after
    the last one kept; were a row not kept left out by that test (a clock behind the
    others'), a second statement reads every row's totals. Rows gone are forgotten, so it
    keeps no more rows than the table holds, and the sum is redone only when a row
    changed, appeared or went. Thread-safe: one thread reads at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[uuid.UUID, tuple[datetime, Flat]] = {}
        self._read = FleetRead(summed_flat([]), own_row=False)
        self._with_own: tuple[Series, Totals, Series] | None = None

    def read(self, own: uuid.UUID) -> FleetRead:
        """Every row but ``own``'s, their sum, and whether ``own``'s row is there."""
        with self._lock:
            rows = self._rows_read(own, skip=True)
            if rows is None:
                rows = self._rows_read(own, skip=False)
                assert rows is not None
            fresh, own_row = rows
            if fresh.keys() != self._rows.keys() or any(
                fresh[process] is not self._rows[process] for process in fresh
            ):
                self._read = FleetRead(summed_flat(totals for _, totals in fresh.values()), own_row)
            elif own_row != self._read.own_row:
                self._read = FleetRead(self._read.summed, own_row)
            self._rows = fresh
            return self._read

    def _rows_read(
        self, own: uuid.UUID, skip: bool
    ) -> tuple[dict[uuid.UUID, tuple[datetime, Flat]], bool] | None:
        """Every row but ``own``'s, as kept or decoded, and whether ``own``'s is there.
        With ``skip``, the totals of the rows flushed no later than the last row kept are
        not read; None if that left out a row not kept."""
        known = {process: at for process, (at, _) in self._rows.items()}
        left_out = Q(process=own)
        if skip and known:
            left_out |= Q(flushed_at__lte=max(known.values()))
        rows = ProcessMetrics.objects.values_list(
            "process",
            "flushed_at",
            # The document as text, decoded below: through JSONField's converter, a scrape
            # after every row was flushed again cost about 1 ms more at 50 rows.
            Case(When(left_out, then=None), default=Cast("totals", TextField())),
        )
        fresh: dict[uuid.UUID, tuple[datetime, Flat]] = {}
        own_row = False
        for process, at, totals in rows:
            if process == own:
                own_row = True
            elif known.get(process) == at:
                fresh[process] = self._rows[process]
            elif totals is None and skip:
                return None
            else:
                fresh[process] = (at, flattened(json.loads(totals) or EMPTY))
        return fresh, own_row

    def with_own(self, others: Series, own: Totals) -> Series:
        """``others`` (a sum :meth:`read` gave) plus the reading process's ``own`` totals:
        the same object again while neither changed, so that its rendering is kept too."""
        with self._lock:
            kept = self._with_own
            if kept is not None and kept[0] is others and kept[1] == own:
                return kept[2]
            total = plus(others, own)
            self._with_own = (others, own, total)
            return total

    def forget(self) -> None:
        """Drop every row kept (the next read decodes every row afresh)."""
        with self._lock:
            self._rows = {}
            self._read = FleetRead(summed_flat([]), own_row=False)
            self._with_own = None


#: The scraping process's fleet.
FLEET = Fleet()
