"""The sweeper's fast chain: a sweep every ``WORKERFLOW_SWEEP_SECONDS``, which is also the
workers' heartbeat.

django-q2's scheduler looks at its schedules only about every 30 s, so the once-a-minute
schedule alone rings the instance of a dead worker up to 90 s after its lease expired. With
precise bells (the ORM broker) each sweep task instead queues the next one, due
``SWEEP_SECONDS`` later, in the same transaction that records its beat. One chain per queue:
the row's ``next_beat_at`` names the link that may continue it, so a duplicate link (a
redelivered task, a reseed racing a late link) records its beat and ends. The schedule, and
every worker as it spawns, reseed a chain that broke (its next link is long overdue); so does
each process that sees the database come back after an outage (a link that ran during it
failed and queued no next one), as soon as the next link is overdue at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Exists, QuerySet

from django_workerflow.conf import settings
from django_workerflow.models import WorkerHeartbeat
from django_workerflow.values.clock import now as clock_now
from django_workerflow.workers import bells

logger = logging.getLogger(__name__)

#: The django-q2 task of one link of the chain.
BEAT_TASK = "django_workerflow.tasks.sweep_and_beat"
#: The heartbeat read's annotation: whether an alarm comes before an idle link would.
_SOON = "probe_soon"


def queue_name() -> str:
    """The task queue this process's workers take tasks from."""
    # Late: django_q may not be an installed app, and its Conf reads Q_CLUSTER on import.
    from django_q.conf import Conf

    return str(Conf.CLUSTER_NAME or Conf.PREFIX)[:100]


@dataclass(frozen=True)
class Beat:
    """What one beat found: whether the chain continues from it, and which of the areas it
    probed have something for the sweep to do."""

    continues: bool
    busy: frozenset[str] = frozenset()


def beat(
    link: datetime | None,
    probes: Mapping[str, Sequence[QuerySet[Any]]] | None = None,
    soon: Callable[[datetime], QuerySet[Any]] | None = None,
    *,
    overdue_is_broken: bool = False,
) -> Beat:
    """Record that a worker of this queue runs tasks, and queue the chain's next link if
    ``link`` is the current one (None: a reseed, which continues only a broken chain).

    ``probes`` names each area of the sweep with the rows it would work on; the read that
    locks the heartbeat row also asks whether any exist, so an idle link is one transaction.
    An area is busy if any of its querysets has a row (all are, on the row's first beat).
    ``soon(until)`` names the rows that keep the chain at ``SWEEP_SECONDS`` if any exists
    (instances whose alarm comes by ``until``); with none and no busy area, the next link
    is ``SWEEP_IDLE_SECONDS`` ahead (an idle backoff; without ``soon``, none).
    ``overdue_is_broken``: a reseed counts the chain broken as soon as its next link is
    overdue (after an outage), not only long overdue."""
    now = clock_now()
    interval = timedelta(seconds=settings.SWEEP_SECONDS)
    idle = timedelta(seconds=settings.SWEEP_IDLE_SECONDS)
    exists = {
        f"probe_{area}_{index}": Exists(rows)
        for area, querysets in (probes or {}).items()
        for index, rows in enumerate(querysets)
    }
    backs_off = soon is not None and idle > interval
    if soon is not None and backs_off:
        exists[_SOON] = Exists(soon(now + idle))
    with transaction.atomic():
        row, created = (
            WorkerHeartbeat.objects.select_for_update()
            .annotate(**exists)
            .get_or_create(queue=queue_name(), defaults={"beat_at": now})
        )
        busy = frozenset(
            area
            for area, querysets in (probes or {}).items()
            if created or any(getattr(row, f"probe_{area}_{i}") for i in range(len(querysets)))
        )
        row.beat_at = now
        expected = row.next_beat_at
        late = timedelta(0) if overdue_is_broken else max(3 * interval, timedelta(seconds=15))
        broken = expected is None or expected < now - late
        chained = bells.uses_delayed_bells() and interval.total_seconds() > 0
        continues = chained and (broken or (link is not None and link == expected))
        if continues:
            quiet = backs_off and not created and not busy and not getattr(row, _SOON)
            row.next_beat_at = now + (idle if quiet else interval)
            _enqueue(row.next_beat_at)
        row.save(update_fields=["beat_at", "next_beat_at"])
    return Beat(continues, busy)


def seed_on_spawn(**_: Any) -> None:
    """django-q2's ``post_spawn``: a new worker restarts a broken chain (and reports)."""
    try:
        beat(None)
    except DatabaseError:
        logger.warning("heartbeat seed failed queue=%s", queue_name(), exc_info=True)


def seed_after_outage() -> None:
    """After an outage (:func:`django_workerflow.store.outage.when_back`): restart a chain whose
    next link is overdue; a link still queued then finds itself replaced and ends."""
    beat(None, overdue_is_broken=True)


def _enqueue(when: datetime) -> None:
    bells.queue_task(BEAT_TASK, when.isoformat(), when=when, name="workerflow sweep")
