"""The public verbs: send_event, pause, resume, cancel, wake, retry_now, sweep (and start,
from :mod:`django_workerflow.runtime.starting`).

Every operation locks the instance row with ``select_for_update`` in a short transaction, so
concurrent workers, events and operators serialise on it, and changes the instance through
its transition methods. The tick lives in :mod:`django_workerflow.runtime.tick`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q, QuerySet

from django_workerflow import tracing
from django_workerflow.conf import settings
from django_workerflow.definition import sensitive
from django_workerflow.definition.drift import awaited_event_names
from django_workerflow.exceptions import WorkflowStateError
from django_workerflow.models import (
    ACTIVE_STATUSES,
    InboundEvent,
    Step,
    StepState,
    StepType,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.models import rows as model_rows
from django_workerflow.runtime import finishing
from django_workerflow.runtime.starting import check_existing_start, start
from django_workerflow.runtime.tick import (
    MAX_REPLAYS_PER_TICK,
    UNREGISTERED_RETRY,
    TickResult,
    tick,
)
from django_workerflow.store import inbound_events, instance_rows, lease, locks
from django_workerflow.store.transactions import satisfy_wait
from django_workerflow.values import jsonvalue, storable
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.masking import Masker
from django_workerflow.values.states import WakeCause
from django_workerflow.workers import bell_rows, bells

__all__ = [
    "MAX_REPLAYS_PER_TICK",
    "SWEEP_GRACE",
    "SWEEP_RERING",
    "UNREGISTERED_RETRY",
    "TickResult",
    "cancel",
    "check_existing_start",
    "pause",
    "resume",
    "retry_now",
    "send_event",
    "start",
    "sweep",
    "tick",
    "wake",
]

logger = logging.getLogger(__name__)

# An alarm this far overdue has lost its bell (or its worker): the sweeper rings it again.
SWEEP_GRACE = timedelta(seconds=15)
# How long the sweeper waits before ringing the same overdue instance again.
SWEEP_RERING = timedelta(minutes=2)


# Events -------------------------------------------------------------------------------


def send_event(
    instance: WorkflowInstance | str,
    event_name: str,
    payload: Any = None,
    *,
    missing_ok: bool = False,
    idempotency_key: str | None = None,
) -> InboundEvent | None:
    """Deliver an event: it satisfies the earliest waiting step of that name, or is queued.

    With ``idempotency_key``, a send that finds an event of the instance sent with that key
    returns it and stores nothing (the instance's row lock orders concurrent sends), so a
    caller can retry after any error, even one raised during the commit.

    A paused instance only queues it; a finished one ignores it and None is returned, and
    so is an unknown key with ``missing_ok`` (for signal handlers). A queued event's
    ``waiting_for`` lists the names the instance's waiting steps wait for.

    On PostgreSQL two statements: the instance looked up and locked, then the event
    delivered (:func:`~django_workerflow.store.inbound_events.deliver`).
    """
    jsonvalue.check_identifier(event_name, what="An event name")
    payload_json = jsonvalue.dumps(payload, what=f"The payload of event '{event_name}'")
    if idempotency_key is not None:
        jsonvalue.check_identifier(idempotency_key, what="An idempotency key")
    with transaction.atomic():
        locked = instance_rows.lock_of(instance)
        if locked is None:
            if missing_ok:
                logger.info("event dropped key=%s event=%s: no such instance", instance, event_name)
                return None
            raise instance_rows.missing(instance)
        if idempotency_key is not None:
            sent = InboundEvent.objects.filter(
                instance_id=locked.pk, idempotency_key=idempotency_key
            ).first()
            if sent is not None:
                logger.info(
                    "event already sent key=%s event=%s idempotency_key=%s: nothing changed",
                    locked.key,
                    sent.event_name,
                    idempotency_key,
                )
                return sent
        if locked.is_terminal:
            return None
        sealer = sensitive.sealer(locked.definition_name)
        if sealer.active:
            sealed = sealer.event(event_name, payload)
            payload_json = jsonvalue.dumps(sealed, what=f"The payload of event '{event_name}'")
        now = clock_now()
        if connection.vendor == "postgresql" and not (
            model_rows.signalled(InboundEvent) or model_rows.signalled(WorkflowInstance)
        ):
            event = _deliver_at_once(locked, event_name, payload_json, now)
        else:
            event = _deliver_in_steps(locked, event_name, payload_json, now)
        if idempotency_key is not None:
            # A statement of its own: the delivery's statement stays the same with or without.
            InboundEvent.objects.filter(pk=event.pk).update(idempotency_key=idempotency_key)
            event.idempotency_key = idempotency_key
    if event.waiting_for is not None and event_name not in event.waiting_for:
        logger.info(
            "event queued key=%s event=%s: no step waits for it; waiting_for=%s",
            locked.key,
            event_name,
            ",".join(event.waiting_for) or "-",
        )
    logger.info(
        "event sent key=%s event=%s claimed=%s%s",
        locked.key,
        event_name,
        event.claimed_by_id is not None,
        f" payload={_logged_payload(locked, event_name, payload)}" if settings.LOG_PAYLOADS else "",
    )
    return event


def _logged_payload(instance: WorkflowInstance, event_name: str, payload: Any) -> str:
    """The payload as ``WORKERFLOW_LOG_PAYLOADS`` logs it: its sensitive values masked (a
    log has no reader permissions)."""
    shown = Masker(sensitive.paths(instance.definition_name)).event(event_name, payload)
    return jsonvalue.dumps(shown, what=f"The payload of event '{event_name}'")


def _deliver_at_once(
    locked: WorkflowInstance, event_name: str, payload_json: str, now: datetime
) -> InboundEvent:
    """PostgreSQL: the event, the wait it satisfies, the wake and its bell in one statement."""
    active = locked.status in ACTIVE_STATUSES
    leased = lease.is_live(locked, now)
    direct = bell_rows.direct_orm_bells()
    bell = None
    if active and not leased and direct:
        bell = inbound_events.Bell(bell_rows.list_key(), bell_rows.payload(locked.pk))
    trace_context = tracing.carrier()
    with connection.cursor() as cursor:
        delivery = inbound_events.deliver(
            cursor,
            locked.pk,
            event_name,
            payload_json,
            now,
            active=active,
            leased=leased,
            # Queued: an admission that ran while this transaction held the row skipped it
            # (the lock order's rule 3), so its own tick asks for admission again.
            admit=active and locked.status == WorkflowStatus.PENDING and locked.admitted_at is None,
            trace_context=trace_context,
            queue_table=bell_rows.queue_table() if direct else None,
            bell=bell,
        )
    if delivery.woken and not leased and not direct:
        # Another broker, or django-q2 on another database: its bell goes through alarms.
        bells.arm(locked.pk, now)
    claimed_at = now if delivery.claimed_by_id is not None else None
    stored = {
        "id": delivery.event_pk,
        "instance_id": locked.pk,
        "event_name": event_name,
        "payload": jsonvalue.loads(payload_json),
        "created_at": now,
        "claimed_by_id": delivery.claimed_by_id,
        "claimed_at": claimed_at,
        "trace_context": trace_context,
    }
    # As if read back: the caller may save or delete it like any other row.
    event = InboundEvent.from_db(connection.alias, list(stored), list(stored.values()))
    event.waiting_for = delivery.waiting_for
    return event


def _deliver_in_steps(
    locked: WorkflowInstance, event_name: str, payload_json: str, now: datetime
) -> InboundEvent:
    """SQLite, or while save signals are connected: the event through the ORM, then the
    wait it satisfies and the wake, a statement each."""
    pk = locked.pk
    event = InboundEvent.objects.create(
        instance=locked,
        event_name=event_name,
        payload=jsonvalue.loads(payload_json),
        created_at=now,
        trace_context=tracing.carrier(),
    )
    if locked.status in ACTIVE_STATUSES:
        step_pk = (
            Step.objects.filter(
                instance_id=pk,
                type=StepType.WAIT,
                state=StepState.WAITING,
                event_name=event_name,
            )
            # At its deadline a wait has timed out, as a tick at the same instant finds.
            .exclude(timeout_at__lte=now)
            .order_by("created_at", "id")
            .values_list("pk", flat=True)
            .first()
        )
        if step_pk is not None:
            with connection.cursor() as cursor:
                satisfy_wait(cursor, pk, step_pk, event.pk, payload_json, now)
            event.claimed_by_id = step_pk
            event.claimed_at = now
            _wake(locked, now, WakeCause.EVENT)
        elif locked.status == WorkflowStatus.PENDING and locked.admitted_at is None:
            # Queued: an admission that ran while this transaction held the row skipped
            # it (the lock order's rule 3), so its own tick asks for admission again.
            _wake(locked, now)
    if event.claimed_by_id is None:
        event.waiting_for = awaited_event_names(pk)
    return event


# Control ------------------------------------------------------------------------------


def pause(instance: WorkflowInstance | str) -> bool:
    """Pause a running instance; it stops at its next step boundary. False: nothing to do."""
    with transaction.atomic():
        locked = locks.lock_instance(instance_rows.pk_of(instance))
        if locked.status != WorkflowStatus.RUNNING:
            return False
        locked.set_paused(clock_now())
    instance_rows.copy_onto(instance, locked)
    return True


def resume(instance: WorkflowInstance | str) -> None:
    """Resume a paused instance at once; WorkflowStateError if it is not paused."""
    with transaction.atomic():
        locked = locks.lock_instance(instance_rows.pk_of(instance))
        if locked.status != WorkflowStatus.PAUSED:
            raise WorkflowStateError(
                f"Cannot resume workflow: expected status 'paused' but got '{locked.status}'. "
                f"Instance '{locked.key}' has status '{locked.status}' and was left as it is: "
                "only a paused instance resumes."
            )
        now = clock_now()
        locked.set_resumed(now)
        bells.arm(locked.pk, now)
    instance_rows.copy_onto(instance, locked)


def cancel(instance: WorkflowInstance | str, reason: str | None = None) -> bool:
    """Cancel an unfinished instance; no step starts after this. False: already finished."""
    reason = storable.check_reason(reason, verb="cancel")
    pk = instance_rows.pk_of(instance)
    with transaction.atomic():
        # The lock order (store/locks.py): whoever waits for this instance first.
        followups = finishing.lock_waiters(pk)
        locked = locks.lock_instance(pk)
        if locked.is_terminal:
            return False
        now = clock_now()
        locked.set_cancelled(now, reason)
        if not followups.has_children:
            # Asked again under the row lock: a child the instance's own tick started
            # between the first look and the lock is cancelled too.
            followups = finishing.look_around(pk)
        finishing.instance_finished(locked, now, reason, followups)
    instance_rows.copy_onto(instance, locked)
    return True


def wake(instance: WorkflowInstance | str) -> bool:
    """Ring the instance's alarm now (re-drive it). False if it is not pending or running."""
    with transaction.atomic():
        locked = locks.lock_instance(instance_rows.pk_of(instance))
        if locked.status not in ACTIVE_STATUSES:
            return False
        _wake(locked, clock_now())
    return True


def retry_now(instance: WorkflowInstance | str) -> list[str]:
    """Bring the pending retries of an active instance forward to now; return their step ids.

    Only a run step's backoff is shortened: a sleep or a wait keeps its time, which is part
    of the workflow. Call :func:`wake` afterwards so that a worker picks the retry up.
    """
    with transaction.atomic():
        locked = locks.lock_instance(instance_rows.pk_of(instance))
        if locked.status not in ACTIVE_STATUSES:
            return []
        now = clock_now()
        retrying = Step.objects.filter(
            instance_id=locked.pk,
            type=StepType.RUN,
            state=StepState.PENDING,
            next_attempt_at__gt=now,
        )
        step_ids = list(retrying.order_by("created_at", "id").values_list("step_id", flat=True))
        if step_ids:
            retrying.update(next_attempt_at=now)
            logger.info("retry brought forward key=%s steps=%s", locked.key, len(step_ids))
    return step_ids


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


# Helpers ------------------------------------------------------------------------------


def _wake(locked: WorkflowInstance, now: datetime, cause: WakeCause | None = None) -> None:
    """Ask for a tick now, for ``cause``; a tick in progress sees ``wake_requested`` and
    passes again."""
    leased = lease.is_live(locked, now)
    rang = not leased and bells.ring(locked.pk, now)
    locked.request_wake(now, leased=leased, cause=cause, rang=rang)
