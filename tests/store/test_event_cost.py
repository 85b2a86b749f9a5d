"""send_event() in few statements (issue 24): on PostgreSQL the instance looked up by key
and locked in one statement, then the event, the wait it satisfies, the wake and its bell
in a second; SQLite takes a statement for each."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.signals import post_save
from django_q.models import OrmQ
from django_q.signing import SignedPackage

import django_workerflow as workerflow
from django_workerflow import tasks
from django_workerflow.models import InboundEvent, StepEvent, StepEventType, WorkflowInstance
from django_workerflow.values.states import WakeCause
from tests.support.statements import TRANSACTION_CONTROL, label

pytestmark = pytest.mark.django_db(transaction=True)


def statements_of(call) -> list[str]:
    """The statements ``call`` sends, transaction control and preparing left out."""
    executed: list[str] = []

    def record(execute, sql, params, many, context):
        executed.append(sql.strip())
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        call()
    return [s for s in executed if not s.upper().startswith(TRANSACTION_CONTROL)]


@pytest.fixture
def waiting_on_a_warm_connection(define):
    def execute(self):
        return self.wait("go", "go", timeout=timedelta(hours=1))

    workflow = define(execute)
    for key in ("first", "k"):
        tasks.tick(workerflow.start(workflow, key=key).pk)
    workerflow.send_event("first", "go")  # prepares the statements on this connection
    OrmQ.objects.all().delete()
    return WorkflowInstance.objects.get(key="k")


def test_send_event__to_a_waiting_step_by_key_takes_two_statements_on_postgresql(
    waiting_on_a_warm_connection,
):
    event = None

    def send() -> None:
        nonlocal event
        event = workerflow.send_event("k", "go", {"n": 1})

    statements = statements_of(send)

    if connection.vendor == "postgresql":
        lock, sending = statements
        assert lock.startswith(label("lock_instance_by_key"))
        assert sending.startswith(label("send_event"))
    else:
        assert len(statements) <= 9, statements
    assert event is not None
    stored = InboundEvent.objects.get(pk=event.pk)
    assert (stored.claimed_by_id, stored.claimed_at, stored.payload) == (
        event.claimed_by_id,
        event.claimed_at,
        {"n": 1},
    )
    assert event.claimed_by_id is not None
    assert event.waiting_for is None
    assert StepEvent.objects.filter(
        step_id=event.claimed_by_id, type=StepEventType.WAIT_SATISFIED, payload={"n": 1}
    ).exists()
    waiting_on_a_warm_connection.refresh_from_db()
    assert waiting_on_a_warm_connection.wake_requested
    assert (
        waiting_on_a_warm_connection.alarm_at
        == waiting_on_a_warm_connection.bell_at
        == event.created_at
    )
    assert waiting_on_a_warm_connection.alarm_cause == WakeCause.EVENT
    [package] = OrmQ.objects.values_list("payload", flat=True)
    assert SignedPackage.loads(package)["args"] == (waiting_on_a_warm_connection.pk,)


def test_send_event__queued_answers_what_the_waits_wait_for_in_the_same_statements(
    waiting_on_a_warm_connection,
):
    event = None

    def send() -> None:
        nonlocal event
        event = workerflow.send_event(waiting_on_a_warm_connection, "early", None)

    statements = statements_of(send)

    if connection.vendor == "postgresql":
        assert len(statements) == 2, statements
    assert event is not None
    assert (event.claimed_by_id, event.waiting_for, event.payload) == (None, ["go"], None)
    assert InboundEvent.objects.get(pk=event.pk).payload is None
    waiting_on_a_warm_connection.refresh_from_db()
    assert not waiting_on_a_warm_connection.wake_requested
    assert not OrmQ.objects.exists()


def test_send_event__fires_the_save_signals_of_the_event_while_receivers_are_connected(
    waiting_on_a_warm_connection,
):
    saved: list[tuple[bool, int | None]] = []

    def receiver(sender, instance, created, **kwargs):
        saved.append((created, instance.claimed_by_id))

    post_save.connect(receiver, sender=InboundEvent)
    try:
        event = workerflow.send_event("k", "go")
    finally:
        post_save.disconnect(receiver, sender=InboundEvent)

    assert event is not None
    assert saved == [(True, None)]  # created queued, then claimed by the wait's statements
    assert InboundEvent.objects.get(pk=event.pk).claimed_by_id == event.claimed_by_id
    waiting_on_a_warm_connection.refresh_from_db()
    assert waiting_on_a_warm_connection.alarm_cause == WakeCause.EVENT
