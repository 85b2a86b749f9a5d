"""Bells on django-q2's ORM broker: precise delayed rows, armed in the state change's
transaction, and the sweeper that re-rings lost or far-off ones. No cluster runs here."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django_q.brokers import get_broker
from django_q.models import OrmQ
from django_q.signing import SignedPackage

import django_workerflow as workerflow
from django_workerflow import tasks
from django_workerflow.models import WorkflowInstance
from django_workerflow.runtime import sweeping
from django_workerflow.runtime.tick import tick
from django_workerflow.values.clock import VirtualClock, now, set_clock
from django_workerflow.workers import bells

pytestmark = pytest.mark.django_db


@pytest.fixture
def sleeper_for_half_an_hour(define):
    def execute(self):
        self.sleep("nap", timedelta(minutes=30))
        return "rested"

    return define(execute)


def queued_bells() -> list[tuple[tuple, object]]:
    """(task args, lock) of every queued tick bell."""
    rows = OrmQ.objects.order_by("pk").values_list("payload", "lock")
    return [
        (tuple(SignedPackage.loads(payload)["args"]), lock)
        for payload, lock in rows
        if SignedPackage.loads(payload)["func"] == bells.TICK_TASK
    ]


def test_start__queues_a_bell_due_now_in_the_same_transaction(sleeper_for_half_an_hour):
    instance = workerflow.start(sleeper_for_half_an_hour, key="k")
    [(args, lock)] = queued_bells()
    assert args == (instance.pk,)
    assert lock == instance.alarm_at
    instance.refresh_from_db()
    assert instance.bell_at == instance.alarm_at


def test_send_event__queues_its_bell_and_records_it_in_the_wakes_one_update(define):
    def execute(self):
        return self.wait("go", "go", timeout=timedelta(hours=1))

    instance = workerflow.start(define(execute), key="k")
    tasks.tick(instance.pk)
    OrmQ.objects.all().delete()

    with CaptureQueriesContext(connection) as captured:
        workerflow.send_event("k", "go", {"n": 1})

    instance.refresh_from_db()
    [(args, lock)] = queued_bells()
    assert args == (instance.pk,)
    assert lock == instance.alarm_at == instance.bell_at
    table = WorkflowInstance._meta.db_table
    updates = [
        q["sql"]
        for q in captured
        if q["sql"].lstrip().replace('"', "").startswith(f"UPDATE {table} ")
    ]
    if connection.vendor == "postgresql":
        # The wake, its bell and bell_at are part of the one statement that sends the event.
        assert updates == []
        assert sum("workerflow_send_event" in q["sql"] for q in captured) >= 1
    else:
        assert len(updates) == 1, updates


def test_start__in_a_rolled_back_transaction_rings_nothing(sleeper_for_half_an_hour):
    def failing_view():
        with transaction.atomic():
            workerflow.start(sleeper_for_half_an_hour, key="k")
            assert len(queued_bells()) == 1
            raise RuntimeError("the view failed")

    with pytest.raises(RuntimeError):
        failing_view()
    assert queued_bells() == []
    assert not WorkflowInstance.objects.exists()


def test_bell__is_not_handed_out_before_its_due_time():
    """Contract with django-q2's ORM broker: a row is dequeued only once its lock passed."""
    broker = get_broker()
    OrmQ.objects.all().delete()
    with transaction.atomic():
        bells.queue_task(bells.TICK_TASK, 1, when=now() + timedelta(hours=1), name="far")
    assert broker.dequeue() is None
    OrmQ.objects.update(lock=now() - timedelta(seconds=1))
    [(_, payload)] = broker.dequeue()
    assert SignedPackage.loads(payload)["args"] == (1,)


def test_tick_task__runs_the_instance_until_it_suspends(sleeper_for_half_an_hour):
    instance = workerflow.start(sleeper_for_half_an_hour, key="k")
    assert tasks.tick(instance.pk) == "suspended"
    instance.refresh_from_db()
    assert instance.status == "running"
    assert instance.alarm_at == instance.steps.get().wake_at


def test_suspension__beyond_the_horizon_queues_no_bell(sleeper_for_half_an_hour):
    instance = workerflow.start(sleeper_for_half_an_hour, key="k")
    OrmQ.objects.all().delete()
    tick(instance.pk)
    assert queued_bells() == []
    instance.refresh_from_db()
    assert instance.alarm_at > now() + bells.HORIZON


def test_sweep__queues_the_bell_of_an_alarm_coming_due_once(sleeper_for_half_an_hour):
    instance = workerflow.start(sleeper_for_half_an_hour, key="k")
    tick(instance.pk)
    OrmQ.objects.all().delete()
    instance.refresh_from_db()
    clock = VirtualClock(instance.alarm_at - timedelta(minutes=2))
    previous = set_clock(clock)
    try:
        assert sweeping.sweep() == 1
        assert sweeping.sweep() == 0
    finally:
        set_clock(previous)
    [(args, lock)] = queued_bells()
    assert args == (instance.pk,)
    assert lock == instance.alarm_at


def test_sweep__rings_an_overdue_instance_whose_bell_was_lost(sleeper_for_half_an_hour):
    instance = workerflow.start(sleeper_for_half_an_hour, key="k")
    OrmQ.objects.all().delete()
    instance.refresh_from_db()
    clock = VirtualClock(instance.alarm_at + sweeping.SWEEP_GRACE + timedelta(seconds=1))
    previous = set_clock(clock)
    try:
        assert sweeping.sweep() == 1
    finally:
        set_clock(previous)
    assert [args for args, _ in queued_bells()] == [(instance.pk,)]


def test_harness__rings_no_bells(sleeper_for_half_an_hour, workerflow_harness):
    workerflow.start(sleeper_for_half_an_hour, key="k")
    workerflow_harness.drain()
    assert queued_bells() == []


def test_sweep__does_not_ring_an_overdue_instance_again_while_its_bell_may_be_queued(
    sleeper_for_half_an_hour,
):
    instance = workerflow.start(sleeper_for_half_an_hour, key="k")
    OrmQ.objects.all().delete()
    instance.refresh_from_db()
    overdue = instance.alarm_at + sweeping.SWEEP_GRACE + timedelta(seconds=1)
    previous = set_clock(VirtualClock(overdue))
    try:
        assert sweeping.sweep() == 1
        assert sweeping.sweep() == 0
        set_clock(VirtualClock(overdue + sweeping.SWEEP_RERING + timedelta(seconds=1)))
        assert sweeping.sweep() == 1
    finally:
        set_clock(previous)
    assert len(queued_bells()) == 2
