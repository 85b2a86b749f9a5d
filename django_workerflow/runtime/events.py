"""Events: :func:`send_event` sends an event to an instance, under its row lock.

It satisfies the earliest waiting step of that name, or is queued. On PostgreSQL the event,
the wait it satisfies, the wake and its bell are one statement; on SQLite, or while save
signals are connected, they go through the ORM a statement each.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from django_workerflow import tracing
from django_workerflow.conf import settings
from django_workerflow.definition import sensitive
from django_workerflow.definition.drift import awaited_event_names
from django_workerflow.models import (
    ACTIVE_STATUSES,
    InboundEvent,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.runtime.control import wake_locked
from django_workerflow.store import inbound_events, instance_rows, lease
from django_workerflow.values import jsonvalue
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.masking import Masker
from django_workerflow.values.states import WakeCause
from django_workerflow.workers import bell_rows, bells

__all__ = ["send_event"]

logger = logging.getLogger(__name__)


def send_event(
    instance: WorkflowInstance | str,
    event_name: str,
    payload: Any = None,
    *,
    missing_ok: bool = False,
    idempotency_key: str | None = None,
) -> InboundEvent | None:
    """Send an event: it satisfies the earliest waiting step of that name, or is queued.

    With ``idempotency_key``, a send that finds an event of the instance sent with that key
    returns it and stores nothing (the instance's row lock orders concurrent sends), so a
    caller can retry after any error, even one raised during the commit.

    A paused instance only queues it; a finished one ignores it and None is returned, and
    so is an unknown key with ``missing_ok`` (for signal handlers). A queued event's
    ``waiting_for`` lists the names the instance's waiting steps wait for.

    On PostgreSQL two statements: the instance looked up and locked, then the event
    sent (:func:`~django_workerflow.store.inbound_events.send`).
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
        if inbound_events.delivers_at_once():
            event = _send_at_once(locked, event_name, payload_json, now)
        else:
            event = _send_in_steps(locked, event_name, payload_json, now)
        if idempotency_key is not None:
            # A statement of its own: the send's statement stays the same with or without.
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


def _send_at_once(
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
    sent = inbound_events.send(
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
    if sent.woken and not leased and not direct:
        # Another broker, or django-q2 on another database: its bell goes through alarms.
        bells.arm(locked.pk, now)
    claimed_at = now if sent.claimed_by_id is not None else None
    stored = {
        "id": sent.event_pk,
        "instance_id": locked.pk,
        "event_name": event_name,
        "payload": jsonvalue.loads(payload_json),
        "created_at": now,
        "claimed_by_id": sent.claimed_by_id,
        "claimed_at": claimed_at,
        "trace_context": trace_context,
    }
    # As if read back: the caller may save or delete it like any other row.
    event = InboundEvent.from_db(connection.alias, list(stored), list(stored.values()))
    event.waiting_for = sent.waiting_for
    return event


def _send_in_steps(
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
        step_pk = inbound_events.open_wait(pk, event_name, now)
        if step_pk is not None:
            inbound_events.satisfy(pk, step_pk, event.pk, payload_json, now)
            event.claimed_by_id = step_pk
            event.claimed_at = now
            wake_locked(locked, now, WakeCause.EVENT)
        elif locked.status == WorkflowStatus.PENDING and locked.admitted_at is None:
            # Queued: an admission that ran while this transaction held the row skipped
            # it (the lock order's rule 3), so its own tick asks for admission again.
            wake_locked(locked, now)
    if event.claimed_by_id is None:
        event.waiting_for = awaited_event_names(pk)
    return event
