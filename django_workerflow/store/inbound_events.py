"""Inbound events: the one statement that sends an event on PostgreSQL (send_event()).

An event sent with the ORM took about ten round trips (insert, find the waiting step,
satisfy it, claim the event, its step event, the bell, the instance's wake); this sends
:func:`~.sql.send_event_statement` instead, after the statement that locked the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from django_workerflow.models import InboundEvent, WorkflowInstance
from django_workerflow.store import executor, instance_writes, sql
from django_workerflow.store.transactions import adapt, satisfy_wait
from django_workerflow.values.states import WakeCause


@dataclass(frozen=True, slots=True)
class Bell:
    """A bell row to write with the wake: django-q2's list key and the signed package."""

    list_key: str
    package: str


@dataclass(frozen=True, slots=True)
class SendReport:
    """What sending the event did: the event's id, the wait step that claimed it (None: queued),
    whether the instance was asked for a tick, and for a queued event the names its
    waiting wait steps wait for (oldest first, each once)."""

    event_pk: int
    claimed_by_id: int | None
    woken: bool
    waiting_for: list[str] | None


def delivers_at_once() -> bool:
    """Whether an event is sent in one statement (:func:`send`): on PostgreSQL, while no save
    signal of an event or an instance is connected. Else the caller writes it through the
    ORM, a statement each (and :func:`satisfy` for the wait it satisfies)."""
    return connection.vendor == "postgresql" and not (
        instance_writes.signalled(InboundEvent) or instance_writes.signalled(WorkflowInstance)
    )


def open_wait(instance_pk: int, event_name: str, now: datetime) -> int | None:
    """The earliest waiting wait step of ``event_name`` that an event sent at ``now``
    satisfies (the deadline rule :func:`send` applies, written once in the store's SQL);
    None if no wait is open to it."""
    values = sql.params(instance=instance_pk, event_name=event_name, now=adapt(now))
    with connection.cursor() as cursor:
        row = executor.execute(cursor, "open_wait", values, prepare=False).fetchone()
    return None if row is None else int(row[0])


def satisfy(
    instance_pk: int, step_pk: int, event_pk: int, payload_json: str, now: datetime
) -> None:
    """Satisfy the waiting wait step ``step_pk`` with the event ``event_pk`` (its claim and
    step event), in the caller's transaction."""
    with connection.cursor() as cursor:
        satisfy_wait(cursor, instance_pk, step_pk, event_pk, payload_json, now)


def send(
    instance_pk: int,
    event_name: str,
    payload_json: str,
    now: datetime,
    *,
    active: bool,
    leased: bool,
    admit: bool,
    trace_context: str | None,
    queue_table: str | None,
    bell: Bell | None,
) -> SendReport:
    """Send the event to the instance ``instance_pk``, whose row the caller's transaction
    holds locked (see :func:`~.sql.send_event_statement` for the flags)."""
    values = sql.params(
        instance=instance_pk,
        event_name=event_name,
        # The step keeps the JSON text as sent; the event, like the ORM, NULL for None.
        payload=payload_json,
        event_payload=None if payload_json == "null" else payload_json,
        now=adapt(now),
        active=active,
        leased=leased,
        admit=admit,
        bell=bell is not None,
        cause_event=WakeCause.EVENT,
        trace_context=trace_context,
        list_key=bell.list_key if bell is not None else None,
        bell_payload=bell.package if bell is not None else None,
    )
    text = sql.send_event_statement(queue_table)
    with connection.cursor() as cursor:
        row = executor.execute(cursor, "send_event", values, text=text).fetchone()
    event_pk, claimed_by_id, woken, names = row
    waiting_for = None if names is None else list(dict.fromkeys(names))
    return SendReport(event_pk, claimed_by_id, woken, waiting_for)
