"""Harness.advance and advance_to walk through virtual time: they stop at each alarm that
falls due within the span, in time order, and drain there, as a worker would."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import django_workerflow as workerflow
from django_workerflow import WorkflowInputError
from django_workerflow.conf import settings
from django_workerflow.models import Step, StepEvent, StepEventType, WorkflowStatus, step_events_of
from django_workerflow.testing import Harness
from tests.support.failures import WorkerDiedError

T0 = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)

pytestmark = pytest.mark.django_db


@pytest.fixture
def harness_from_t0(db):
    with Harness(start=T0) as harness_from_t0:
        yield harness_from_t0


def noting_time(self, step_id: str) -> str:
    return self.run(step_id, lambda: self.now().isoformat())


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def test_advance__walks_through_sleeps_in_a_row(define, harness_from_t0):
    def execute(self):
        self.sleep("first", 10)
        woke = noting_time(self, "woke-once")
        self.sleep("second", 10)
        return [woke, noting_time(self, "woke-twice")]

    instance = workerflow.start(define(execute))
    harness_from_t0.advance(60)
    instance.refresh_from_db()
    assert (instance.status, instance.result) == (WorkflowStatus.COMPLETED, [at(10), at(20)])
    assert harness_from_t0.now() == T0 + timedelta(seconds=60)


def test_advance__walks_through_a_take_over_and_the_retry_it_schedules(define, harness_from_t0):
    deaths = [1]

    def step():
        if deaths:
            deaths.pop()
            raise WorkerDiedError()
        return harness_from_t0.now().isoformat()

    instance = workerflow.start(define(lambda self: self.run("work", step)))
    with pytest.raises(WorkerDiedError):
        harness_from_t0.drain()
    harness_from_t0.advance(settings.LEASE_SECONDS + 10)

    instance.refresh_from_db()
    # Taken over when the lease ran out, retried after the first backoff (0.25 s).
    assert (instance.status, instance.result) == (
        WorkflowStatus.COMPLETED,
        at(settings.LEASE_SECONDS + 0.25),
    )
    failed = StepEvent.objects.get(step__instance=instance, type=StepEventType.ATTEMPT_FAILED)
    assert failed.recorded_at == T0 + timedelta(seconds=settings.LEASE_SECONDS)


def test_advance__ticks_each_instance_when_its_own_alarm_falls_due(define, harness_from_t0):
    def sleeps_then_notes(self):
        self.sleep("nap", self.input)
        return noting_time(self, "woke")

    definition = define(sleeps_then_notes)
    late = workerflow.start(definition, input=20)
    early = workerflow.start(definition, input=10)
    harness_from_t0.advance(30)
    late.refresh_from_db()
    early.refresh_from_db()
    assert (early.result, late.result) == (at(10), at(20))
    assert early.finished_at == T0 + timedelta(seconds=10)


def test_advance__retries_in_a_row_each_wait_their_own_backoff(define, harness_from_t0):
    def fail():
        raise ValueError("down")

    instance = workerflow.start(define(lambda self: self.run("sync", fail, max_attempts=4)))
    harness_from_t0.advance(5)
    step = Step.objects.get(instance=instance)
    started = [
        event
        for event in step_events_of(instance, [step])
        if event.type == StepEventType.ATTEMPT_STARTED
    ]
    assert [event.recorded_at - T0 for event in started] == [
        timedelta(seconds=seconds) for seconds in (0, 0.25, 0.75, 1.75)
    ]
    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.FAILED


def test_advance_to__walks_to_an_absolute_time(define, harness_from_t0):
    def execute(self):
        self.sleep("first", 10)
        self.sleep("second", 10)
        return noting_time(self, "done")

    instance = workerflow.start(define(execute))
    assert harness_from_t0.advance_to(T0 + timedelta(minutes=1)) == 3
    instance.refresh_from_db()
    assert instance.result == at(20)
    assert harness_from_t0.now() == T0 + timedelta(minutes=1)


def test_advance_to__refuses_to_move_the_clock_back(harness_from_t0):
    with pytest.raises(WorkflowInputError, match="cannot move its clock back"):
        harness_from_t0.advance_to(T0 - timedelta(seconds=1))


def test_advance_to__refuses_a_naive_time(harness_from_t0):
    with pytest.raises(WorkflowInputError, match="timezone-aware"):
        harness_from_t0.advance_to(datetime(2030, 5, 6, 7, 9))  # naive on purpose
