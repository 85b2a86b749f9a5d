"""Scheduled workflows: the :class:`WorkflowSchedule` rows, their occurrences, and starting
one instance per occurrence.

Each occurrence starts ``start(name, key=f"{name}@{occurrence}", input={"scheduled_at":
occurrence})`` with the occurrence in ISO 8601 UTC, so however many workers fire it, the
key makes it happen once; the schedule row is locked while it fires, and ``next_run_at``
moves past ``now`` in the same transaction. The next occurrence is armed as a precise bell
(:func:`bells.ring_task`); the sweeper fires what a lost bell or downtime left due.

After downtime only the most recent missed occurrence starts; with ``schedule_catch_up``
every missed one starts, oldest first, bounded to the :data:`MAX_CATCH_UP` most recent.

One schedule that fails (its start raises, say) is logged and skipped: it never stops the
others from being synced or fired.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings as django_settings
from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet

from django_workerflow import registry
from django_workerflow.definition.options import cron as cron_walk
from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.exceptions import WorkflowStateError
from django_workerflow.models import WorkflowInstance, WorkflowSchedule
from django_workerflow.runtime import starting
from django_workerflow.values.clock import now as clock_now
from django_workerflow.workers import bells

logger = logging.getLogger(__name__)

#: The django-q2 task a schedule bell runs.
SCHEDULE_TASK = "django_workerflow.tasks.run_schedules"
#: With ``schedule_catch_up``, at most this many missed occurrences start (the latest ones).
MAX_CATCH_UP = 100

_synced_in_process = False


def scheduled_definitions() -> dict[str, type[WorkflowDefinition]]:
    """The highest registered version of every workflow name that declares a schedule."""
    found = {}
    for name in registry.names():
        definition = registry.get(name)
        if definition.schedule is not None:
            found[name] = definition
    return found


def timezone_of(definition: type[WorkflowDefinition]) -> str:
    return definition.schedule_timezone or django_settings.TIME_ZONE or "UTC"


def occurrence_key(name: str, occurrence: datetime) -> str:
    """The instance key of an occurrence: ``nightly@2026-12-01T03:00:00+00:00``."""
    return f"{name}@{iso_utc(occurrence)}"


def iso_utc(when: datetime) -> str:
    return when.astimezone(UTC).isoformat()


def next_occurrence(cron: str, timezone: str, after: datetime) -> datetime:
    """The first occurrence strictly after ``after``, in UTC."""
    local = after.astimezone(ZoneInfo(timezone))
    return cron_walk(cron, local).get_next(datetime).astimezone(UTC)


@dataclass(frozen=True, slots=True)
class DueOccurrences:
    """The occurrences to start, oldest first, and whether older ones were left out."""

    occurrences: list[datetime]
    cut: bool


def due_occurrences(
    cron: str, timezone: str, first: datetime, now: datetime, *, limit: int
) -> DueOccurrences:
    """The latest ``limit`` occurrences in ``[first, now]``, oldest first."""
    # get_prev is strict: start just past now's second so an occurrence at now counts.
    start = now.replace(microsecond=0) + timedelta(seconds=1)
    walk = cron_walk(cron, start.astimezone(ZoneInfo(timezone)))
    found: list[datetime] = []
    # One more than the limit: it tells whether the limit cut any.
    while len(found) <= limit:
        occurrence = walk.get_prev(datetime).astimezone(UTC)
        if occurrence < first:
            break
        found.append(occurrence)
    return DueOccurrences(found[:limit][::-1], cut=len(found) > limit)


# Keeping the rows in sync with the code ------------------------------------------------


def sync(now: datetime | None = None, *, restart: bool = False) -> None:
    """Create or update a row per scheduled definition; disable the rows whose definition
    no longer declares a schedule (they are kept, with ``in_code`` false).

    ``restart`` moves every schedule's next run to its first occurrence after ``now`` (the
    test harness begins its virtual world there, whatever the rows said).
    """
    now = now or clock_now()
    definitions = scheduled_definitions()
    rows = {row.name: row for row in WorkflowSchedule.objects.all()}
    for name, definition in definitions.items():
        with _each_schedule(name, "sync"):
            _sync_one(rows.get(name), name, definition, now)
    if restart:
        for row in WorkflowSchedule.objects.filter(in_code=True):
            with _each_schedule(row.name, "sync"):
                row.next_run_at = next_occurrence(row.cron, row.timezone, now)
                row.save(update_fields=["next_run_at"])
    for name, row in rows.items():
        if name not in definitions and row.in_code:
            row.in_code = row.enabled = False
            row.updated_at = now
            row.save(update_fields=["in_code", "enabled", "updated_at"])
            logger.info("schedule disabled name=%s: no definition declares it", name)


def sync_after_migrate(using: str = "default", **_: object) -> None:
    """``post_migrate`` receiver: keep the schedule rows in sync with the code."""
    if using == "default":
        sync()


def _sync_one(
    row: WorkflowSchedule | None, name: str, definition: type[WorkflowDefinition], now: datetime
) -> None:
    cron, timezone = str(definition.schedule), timezone_of(definition)
    catch_up = definition.schedule_catch_up
    if row is None:
        try:
            with transaction.atomic():
                row = WorkflowSchedule.objects.create(
                    name=name,
                    cron=cron,
                    timezone=timezone,
                    catch_up=catch_up,
                    next_run_at=next_occurrence(cron, timezone, now),
                    updated_at=now,
                )
                _arm(row)
        except IntegrityError:  # another process created it first
            return
        logger.info("schedule created name=%s cron=%r timezone=%s", name, cron, timezone)
        return
    if (row.cron, row.timezone, row.catch_up, row.in_code) == (cron, timezone, catch_up, True):
        return
    moved = (row.cron, row.timezone) != (cron, timezone) or not row.in_code
    if not row.in_code:
        row.enabled = True
    row.cron, row.timezone, row.catch_up, row.in_code = cron, timezone, catch_up, True
    if moved:
        row.next_run_at = next_occurrence(cron, timezone, now)
    row.updated_at = now
    with transaction.atomic():
        row.save()
        _arm(row)


# Firing ------------------------------------------------------------------------------


def fire_due(
    now: datetime | None = None, *, names: Collection[str] | None = None
) -> list[WorkflowInstance]:
    """Start the due occurrences of every enabled schedule (or of those ``names``); return
    the instances started."""
    now = now or clock_now()
    due = sweep_backlog(now)[0]
    if names is not None:
        due = due.filter(name__in=names)
    started: list[WorkflowInstance] = []
    for pk, name in due.values_list("pk", "name"):
        with _each_schedule(name, "fire"):
            started.extend(_fire(pk, now))
    return started


@contextmanager
def _each_schedule(name: str, action: str) -> Iterator[None]:
    """Work on one schedule in a savepoint of its own: an error is logged with its
    traceback, rolled back, and stops no other schedule."""
    try:
        with transaction.atomic():
            yield
    except Exception:  # a user's definition or start may raise anything
        logger.exception("schedule failed name=%s action=%s: the others go on", name, action)


def _fire(pk: int, now: datetime) -> list[WorkflowInstance]:
    with transaction.atomic():
        row = WorkflowSchedule.objects.select_for_update().get(pk=pk)
        if not (row.enabled and row.in_code and row.next_run_at and row.next_run_at <= now):
            return []  # another worker fired it, or an operator disabled it meanwhile
        limit = MAX_CATCH_UP if row.catch_up else 1
        due = due_occurrences(row.cron, row.timezone, row.next_run_at, now, limit=limit)
        occurrences = due.occurrences
        if row.catch_up and due.cut:
            logger.warning(
                "schedule catch-up bounded name=%s: starting the latest %s missed occurrences",
                row.name,
                MAX_CATCH_UP,
            )
        started = [
            starting.start(
                row.name,
                key=occurrence_key(row.name, occurrence),
                input={"scheduled_at": iso_utc(occurrence)},
                scheduled=True,
            )
            for occurrence in occurrences
        ]
        if occurrences:
            row.last_run_at = occurrences[-1]
        row.next_run_at = next_occurrence(row.cron, row.timezone, now)
        row.updated_at = now
        row.save(update_fields=["last_run_at", "next_run_at", "updated_at"])
        _arm(row)
    for occurrence in occurrences:
        logger.info("schedule fired name=%s occurrence=%s", row.name, iso_utc(occurrence))
    return started


def sweep(now: datetime | None = None) -> int:
    """The sweeper's share: sync once per process, fire what is due, and queue the bells of
    occurrences coming within the bell horizon. Return the instances started."""
    now = now or clock_now()
    sync_once(now)
    started = fire_due(now)
    for row in sweep_backlog(now)[1]:
        with transaction.atomic():
            _arm(row)
    return len(started)


def sync_once(now: datetime | None = None) -> None:
    """:func:`sync` once per process (the sweeper's first run); then nothing."""
    global _synced_in_process
    if not _synced_in_process:
        sync(now)
        _synced_in_process = True


def sweep_backlog(now: datetime) -> tuple[QuerySet[WorkflowSchedule], QuerySet[WorkflowSchedule]]:
    """What :func:`sweep` works on at ``now``: the schedules due (it fires them) and those
    whose occurrence comes within the bell horizon without its bell (it rings them). The
    sweeper's probe asks if either exists."""
    live = WorkflowSchedule.objects.filter(enabled=True, in_code=True)
    due = live.filter(next_run_at__lte=now)
    upcoming = live.filter(next_run_at__lte=now + bells.HORIZON).exclude(bell_at=F("next_run_at"))
    return due, upcoming


# Operator controls ---------------------------------------------------------------------


def run_now(name: str, now: datetime | None = None) -> WorkflowInstance:
    """Start the scheduled workflow now, outside its schedule (key ``name@manual-<ISO>``)."""
    now = now or clock_now()
    when = iso_utc(now)
    return starting.start(name, key=f"{name}@manual-{when}", input={"scheduled_at": when})


def set_enabled(name: str, enabled: bool, now: datetime | None = None) -> bool:
    """Enable or disable a schedule; False if it already was. An enabled schedule starts
    at its next occurrence after now: the occurrences missed while disabled do not run."""
    now = now or clock_now()
    with transaction.atomic():
        row = WorkflowSchedule.objects.select_for_update().get(name=name)
        if row.enabled == enabled:
            return False
        if enabled and not row.in_code:
            raise WorkflowStateError(
                f"Schedule {name!r} cannot be enabled: no workflow definition declares it "
                "any more. Add `schedule` back to the definition and deploy."
            )
        row.enabled = enabled
        if enabled:
            row.next_run_at = next_occurrence(row.cron, row.timezone, now)
        row.updated_at = now
        row.save(update_fields=["enabled", "next_run_at", "updated_at"])
        if enabled:
            _arm(row)
    logger.info("schedule %s name=%s", "enabled" if enabled else "disabled", name)
    return True


def _arm(row: WorkflowSchedule) -> None:
    """Queue the bell of the row's next occurrence (inside the transaction that set it)."""
    if row.next_run_at is None or not row.enabled:
        return
    if bells.ring_task(SCHEDULE_TASK, when=row.next_run_at, name=f"workerflow schedule {row.name}"):
        row.note_bell()
