"""The django-q2 tasks the engine enqueues: a tick per bell, a schedule bell, the sweeper."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db import InterfaceError, OperationalError, connection
from django.db.models import QuerySet

from django_workerflow.deploy import verdicts
from django_workerflow.exceptions import DatabaseUnavailableError
from django_workerflow.runtime import sweeping
from django_workerflow.runtime.composition import deliveries
from django_workerflow.runtime.flow import schedules
from django_workerflow.runtime.tick import tick as run_tick
from django_workerflow.store import flushed_totals, outage
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.control_flow import TickAborted
from django_workerflow.workers import handled_bell, sweep_chain


class SweepArea(StrEnum):
    """The parts of a sweep the beat probes for work, each run only when it has some."""

    INSTANCES = "instances"
    DELIVERIES = "deliveries"
    SCHEDULES = "schedules"
    METRICS = "metrics"


def tick(instance_pk: int) -> str:
    """Run one tick of the instance (a bell rang); return what it did. Then flush this
    process's metrics if they are due (:mod:`django_workerflow.store.flushed_totals`).

    A tick that loses the database raises :class:`DatabaseUnavailableError` (an
    ``Exception``: django-q2's worker reports it and lives on); the bell is acknowledged as a
    failure and the instance's lease, running out, leads the sweeper to ring it again."""
    try:
        bell = handled_bell.bell_of(instance_pk)
        outcome = run_tick(instance_pk, renew_lease=True, bell=bell).outcome
    except (TickAborted, OperationalError, InterfaceError) as error:
        raise _unavailable(instance_pk, error) from None
    outage.back()
    flushed_totals.flush_if_due()
    return outcome


def _unavailable(instance_pk: int, error: BaseException) -> DatabaseUnavailableError:
    """The error a tick that lost the database ends with; the outage is logged once."""
    cause = error.__cause__ if isinstance(error, TickAborted) else error
    cause = cause or error
    outage.lost(connection.alias, cause)
    reason = " ".join(str(cause).split()) or type(cause).__name__
    return DatabaseUnavailableError(
        f"The tick of instance {instance_pk} stopped: the database is unavailable "
        f"({type(cause).__name__}: {reason}). Nothing more was recorded; the instance is "
        "taken up again when its lease runs out."
    )


def sweep() -> int:
    """Ring the bells that are missing, ticks and ``on_finish`` deliveries alike, and fire
    the schedules left due (scheduled about once a minute); report, and restart the fast
    sweeper chain if it broke."""
    return _beat_and_sweep(None)


def sweep_and_beat(link: str) -> int:
    """One link of the fast sweeper chain: report, queue the next link, sweep."""
    return _beat_and_sweep(datetime.fromisoformat(link))


def deliver(delivery_pk: int) -> bool | None:
    """Call a finished instance's ``on_finish`` hook if its delivery is due."""
    return deliveries.deliver(delivery_pk)


def _beat_and_sweep(link: datetime | None) -> int:
    """Beat, probing in the same read whether each area of the sweep has rows to work on,
    and sweep only those that have (an idle link is one transaction). Flush this process's
    metrics if they are due: a worker that went idle flushes its last ticks' counts here."""
    schedules.sync_once()  # before the probe: it creates the schedules' rows
    now = clock_now()
    probes: dict[str, Sequence[QuerySet[Any]]] = {
        SweepArea.INSTANCES: sweeping.sweep_backlog(now),
        SweepArea.DELIVERIES: (deliveries.sweep_backlog(now),),
        SweepArea.SCHEDULES: schedules.sweep_backlog(now),
        SweepArea.METRICS: (flushed_totals.quiet_rows(),),
    }
    busy = sweep_chain.beat(link, probes, sweeping.alarms_by).busy
    rung = 0
    if SweepArea.INSTANCES in busy:
        rung += sweeping.sweep()
    if SweepArea.DELIVERIES in busy:
        rung += deliveries.ring_due()
    if SweepArea.SCHEDULES in busy:
        rung += schedules.sweep()
    flushed_totals.flush_if_due()
    if SweepArea.METRICS in busy:
        flushed_totals.retire()
    return rung


def run_schedules() -> int:
    """Start the due occurrences of the schedules (a schedule bell rang)."""
    return len(schedules.fire_due())


def refresh_replay_verdicts(after_pk: int | None = None) -> int:
    """Store the replay verdicts of the unfinished instances not yet checked against the code
    this worker runs, a few batches per run (:mod:`django_workerflow.deploy.verdicts`)."""
    return verdicts.run_task(after_pk)
