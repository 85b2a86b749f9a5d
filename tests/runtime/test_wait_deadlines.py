"""At its deadline a wait has timed out: an event sent at that very instant does not satisfy
it, whether it is delivered at once, queued while the instance is paused, or found by a tick
at the same instant."""

from __future__ import annotations

from datetime import timedelta

import pytest

import django_workerflow as workerflow
from django_workerflow import WaitStepTimedOutError
from django_workerflow.models import Step, StepState, WorkflowStatus

pytestmark = pytest.mark.django_db

TIMEOUT = 60


def waits_with_timeout(self):
    try:
        return self.wait("approval", "approved", timeout=TIMEOUT)
    except WaitStepTimedOutError:
        return "timed out"


def outcome(instance) -> tuple[str, object, str]:
    instance.refresh_from_db()
    step = Step.objects.get(instance=instance, step_id="approval")
    return instance.status, instance.result, step.state


@pytest.fixture
def waiting_with_a_deadline(define, workerflow_harness):
    instance = workerflow.start(define(waits_with_timeout))
    workerflow_harness.drain()
    return instance


def test_send_event__exactly_at_the_deadline_does_not_satisfy_the_wait(
    waiting_with_a_deadline, workerflow_harness
):
    workerflow_harness.clock.advance(timedelta(seconds=TIMEOUT))
    event = workerflow.send_event(waiting_with_a_deadline.key, "approved", "yes")
    assert event.claimed_by_id is None
    workerflow_harness.drain()
    assert outcome(waiting_with_a_deadline) == (
        WorkflowStatus.COMPLETED,
        "timed out",
        StepState.TIMED_OUT,
    )


def test_send_event__just_before_the_deadline_satisfies_the_wait(
    waiting_with_a_deadline, workerflow_harness
):
    workerflow_harness.clock.advance(timedelta(seconds=TIMEOUT) - timedelta(microseconds=1))
    event = workerflow.send_event(waiting_with_a_deadline.key, "approved", "yes")
    assert event.claimed_by_id is not None
    workerflow_harness.drain()
    assert outcome(waiting_with_a_deadline) == (
        WorkflowStatus.COMPLETED,
        "yes",
        StepState.SATISFIED,
    )


def test_resume__an_event_queued_exactly_at_the_deadline_is_not_claimed(
    waiting_with_a_deadline, workerflow_harness
):
    workerflow.pause(waiting_with_a_deadline)
    workerflow_harness.clock.advance(timedelta(seconds=TIMEOUT))
    workerflow.send_event(waiting_with_a_deadline.key, "approved", "yes")  # paused: only queued
    workerflow.resume(waiting_with_a_deadline)
    workerflow_harness.drain()
    assert outcome(waiting_with_a_deadline) == (
        WorkflowStatus.COMPLETED,
        "timed out",
        StepState.TIMED_OUT,
    )


def test_resume__an_event_queued_before_the_deadline_is_claimed(
    waiting_with_a_deadline, workerflow_harness
):
    workerflow.pause(waiting_with_a_deadline)
    workerflow_harness.clock.advance(timedelta(seconds=TIMEOUT - 1))
    workerflow.send_event(waiting_with_a_deadline.key, "approved", "yes")
    workerflow_harness.clock.advance(timedelta(seconds=5))
    workerflow.resume(waiting_with_a_deadline)
    workerflow_harness.drain()
    assert outcome(waiting_with_a_deadline) == (
        WorkflowStatus.COMPLETED,
        "yes",
        StepState.SATISFIED,
    )
