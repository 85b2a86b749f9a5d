"""The sweeper's probe: an idle link asks in its heartbeat read whether the sweep has
anything to do, and runs the sweep's reads only for the areas that have."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import django_workerflow as workerflow
from django_workerflow import tasks
from django_workerflow.models import (
    FinishDelivery,
    WorkerHeartbeat,
    WorkflowInstance,
    WorkflowSchedule,
)
from django_workerflow.runtime.flow import schedules

pytestmark = pytest.mark.django_db


SWEPT = (WorkflowInstance, FinishDelivery, WorkflowSchedule)


def link() -> str:
    """The current link of the chain (seeding it: a first beat sweeps everything)."""
    tasks.sweep()
    return WorkerHeartbeat.objects.get().next_beat_at.isoformat()


def sweep_reads(statements: list[str]) -> list[str]:
    """The statements that read a swept table other than through the heartbeat's probe."""
    tables = [model._meta.db_table for model in SWEPT]
    heartbeat = WorkerHeartbeat._meta.db_table
    return [
        sql for sql in statements if any(table in sql for table in tables) and heartbeat not in sql
    ]


def test_sweep_probe__an_idle_link_reads_only_the_heartbeat_with_its_probe():
    current = link()
    with CaptureQueriesContext(connection) as captured:
        assert tasks.sweep_and_beat(current) == 0
    statements = [query["sql"] for query in captured.captured_queries]
    assert sweep_reads(statements) == []
    probe = next(sql for sql in statements if WorkerHeartbeat._meta.db_table in sql)
    for model in SWEPT:
        assert model._meta.db_table in probe


def overdue_instance(define) -> None:
    instance = workerflow.start(define(lambda self: self.sleep("nap", 10)), key="orphaned")
    now = timezone.now()
    # A worker died holding the lease: no bell rings for its lease expiry.
    WorkflowInstance.objects.filter(pk=instance.pk).update(
        status="running",
        lease_token="dead",
        lease_expires_at=now - timedelta(seconds=1),
        alarm_at=now - timedelta(seconds=1),
        bell_at=None,
    )


def due_delivery(define) -> None:
    instance = workerflow.start(define(lambda self: None), key="delivered")
    now = timezone.now()
    FinishDelivery.objects.create(instance=instance, created_at=now, next_attempt_at=now)


def due_schedule(define_with) -> None:
    define_with(lambda self: None, name="minutely", schedule="* * * * *")
    schedules.sync()
    due = timezone.now().replace(second=0, microsecond=0)  # this minute's occurrence
    # Its bell was queued, then lost: only the sweep fires it.
    WorkflowSchedule.objects.filter(name="minutely").update(next_run_at=due, bell_at=due)


@pytest.mark.parametrize("backlog", [overdue_instance, due_delivery])
def test_sweep_probe__a_link_with_work_sweeps(backlog, define):
    current = link()
    backlog(define)
    with CaptureQueriesContext(connection) as captured:
        assert tasks.sweep_and_beat(current) == 1
    assert sweep_reads([query["sql"] for query in captured.captured_queries]) != []


def test_sweep_probe__a_link_fires_a_due_schedule_whose_bell_was_lost(define_with):
    current = link()
    due_schedule(define_with)
    assert tasks.sweep_and_beat(current) == 1
    assert WorkflowInstance.objects.filter(definition_name="minutely").count() == 1


def next_link_in() -> float:
    """Seconds from the last beat to the chain's next link."""
    row = WorkerHeartbeat.objects.get()
    return (row.next_beat_at - row.beat_at).total_seconds()


def test_sweep_chain__an_idle_link_queues_the_next_one_after_the_idle_backoff(settings):
    settings.WORKERFLOW_SWEEP_SECONDS = 5.0
    settings.WORKERFLOW_SWEEP_IDLE_SECONDS = 15.0
    current = link()
    assert next_link_in() == 5.0  # a first beat sweeps everything

    tasks.sweep_and_beat(current)

    assert next_link_in() == 15.0


def leased_instance(define) -> None:
    instance = workerflow.start(define(lambda self: self.sleep("nap", 10)), key="leased")
    now = timezone.now()
    # A worker is at work on it: if it dies, the sweep after its lease expiry rings it.
    WorkflowInstance.objects.filter(pk=instance.pk).update(
        status="running",
        lease_token="alive",
        lease_expires_at=now + timedelta(seconds=12),
        alarm_at=now + timedelta(seconds=12),
        bell_at=None,
    )


@pytest.mark.parametrize("backlog", [leased_instance, overdue_instance, due_delivery])
def test_sweep_chain__a_link_with_work_or_an_alarm_coming_keeps_the_fast_pace(
    backlog, define, settings
):
    settings.WORKERFLOW_SWEEP_SECONDS = 5.0
    settings.WORKERFLOW_SWEEP_IDLE_SECONDS = 15.0
    current = link()
    backlog(define)

    tasks.sweep_and_beat(current)

    assert next_link_in() == 5.0


def test_sweep_chain__an_idle_backoff_no_longer_than_the_interval_is_none(settings):
    settings.WORKERFLOW_SWEEP_SECONDS = 5.0
    settings.WORKERFLOW_SWEEP_IDLE_SECONDS = 0.0
    current = link()

    tasks.sweep_and_beat(current)

    assert next_link_in() == 5.0


def test_sweep_chain__the_idle_backoff_is_three_sweep_intervals_unless_set(settings):
    settings.WORKERFLOW_SWEEP_SECONDS = 2.0
    current = link()

    tasks.sweep_and_beat(current)

    assert next_link_in() == 6.0
