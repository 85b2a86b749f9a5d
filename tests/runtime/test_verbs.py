"""The verbs on an instance (``runtime.control``, ``runtime.events``, ``runtime.starting``):
each one transaction under its row lock, and what each returns and raises."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_workerflow.exceptions import WorkflowStateError
from django_workerflow.models import InboundEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime import control, events, starting
from django_workerflow.values.states import StepState
from tests.support.instances import refreshed, step

pytestmark = pytest.mark.django_db


# pause, resume, cancel, wake -----------------------------------------------------------


def test_pause__of_a_running_instance_pauses_it_and_says_so(waiting):
    assert control.pause(waiting) is True
    assert waiting.status == WorkflowStatus.PAUSED  # the caller's object is refreshed
    assert refreshed(waiting).status == WorkflowStatus.PAUSED


def test_pause__of_an_instance_that_is_not_running_changes_nothing(waiting):
    control.pause(waiting)

    assert control.pause(waiting.key) is False
    assert refreshed(waiting).status == WorkflowStatus.PAUSED


def test_resume__of_a_paused_instance_makes_it_running_and_due(waiting, workerflow_harness):
    control.pause(waiting)

    control.resume(waiting)

    row = refreshed(waiting)
    assert (row.status, row.alarm_at) == (WorkflowStatus.RUNNING, workerflow_harness.now())


def test_resume__of_an_instance_that_is_not_paused_raises_naming_its_status(waiting):
    with pytest.raises(WorkflowStateError, match="expected status 'paused' but got 'running'"):
        control.resume(waiting)


def test_cancel__of_an_unfinished_instance_cancels_it_with_its_reason(waiting):
    assert control.cancel(waiting, reason="customer left") is True

    row = refreshed(waiting)
    assert row.status == WorkflowStatus.CANCELLED
    assert row.workflow_events.filter(reason="customer left").exists()


def test_cancel__of_a_finished_instance_changes_nothing(waiting):
    control.cancel(waiting)

    assert control.cancel(waiting) is False
    assert refreshed(waiting).status == WorkflowStatus.CANCELLED


def test_wake__of_an_active_instance_makes_it_due_now(waiting, workerflow_harness):
    assert control.wake(waiting) is True
    assert refreshed(waiting).alarm_at == workerflow_harness.now()


def test_wake__of_a_finished_instance_does_nothing(waiting):
    control.cancel(waiting)

    assert control.wake(waiting) is False


def test_verbs__on_an_unknown_key_raise_does_not_exist(db):
    for verb in (control.pause, control.resume, control.cancel, control.wake, control.retry_now):
        with pytest.raises(WorkflowInstance.DoesNotExist):
            verb("no-such-key")


# retry_now ----------------------------------------------------------------------------


def test_retry_now__brings_pending_retries_forward_and_returns_their_step_ids(
    define, workerflow_harness
):
    def fail() -> None:
        raise ValueError("transient")

    instance = starting.start(
        define(lambda self: self.run("charge", fail, backoff=lambda n: 3600)), key="retrying"
    )
    workerflow_harness.drain()
    assert step(instance, "charge").next_attempt_at > workerflow_harness.now()

    assert control.retry_now(instance) == ["charge"]
    assert step(instance, "charge").next_attempt_at == workerflow_harness.now()
    assert control.retry_now(instance) == []


# send_event ---------------------------------------------------------------------------


def test_send_event__satisfies_the_waiting_step_and_makes_the_instance_due(
    waiting, workerflow_harness
):
    event = events.send_event(waiting, "go", {"n": 1})

    assert event is not None
    go = step(waiting, "go")
    assert (go.state, go.payload) == (StepState.SATISFIED, {"n": 1})
    assert event.claimed_by_id == go.pk
    assert refreshed(waiting).alarm_at == workerflow_harness.now()


def test_send_event__that_no_step_waits_for_is_queued_naming_what_the_instance_waits_for(
    waiting,
):
    event = events.send_event(waiting, "other", 1)

    assert event is not None
    assert event.claimed_by_id is None
    assert event.waiting_for == ["go"]
    assert step(waiting, "go").state == StepState.WAITING


def test_send_event__to_a_paused_instance_only_queues_it(waiting):
    control.pause(waiting)

    event = events.send_event(waiting, "go", 1)

    assert event is not None
    assert event.claimed_by_id is None
    assert step(waiting, "go").state == StepState.WAITING


def test_send_event__to_a_finished_instance_is_ignored(waiting):
    control.cancel(waiting)

    assert events.send_event(waiting, "go", 1) is None
    assert not InboundEvent.objects.filter(instance=waiting).exists()


def test_send_event__to_an_unknown_key_raises_unless_missing_ok(db):
    with pytest.raises(WorkflowInstance.DoesNotExist):
        events.send_event("no-such-key", "go")

    assert events.send_event("no-such-key", "go", missing_ok=True) is None


def test_send_event__to_a_deleted_instance_is_as_to_an_unknown_key(waiting):
    WorkflowInstance.objects.filter(pk=waiting.pk).delete()

    with pytest.raises(WorkflowInstance.DoesNotExist, match="no longer exists"):
        events.send_event(waiting, "go")

    assert events.send_event(waiting, "go", missing_ok=True) is None


def test_send_event__after_a_wait_timed_out_is_queued(define, workerflow_harness):
    instance = starting.start(
        define(lambda self: self.wait("go", "go", timeout=timedelta(minutes=1))), key="timeout"
    )
    workerflow_harness.drain()
    workerflow_harness.clock.advance(timedelta(minutes=1))

    event = events.send_event(instance, "go", 1)

    assert event is not None
    assert event.claimed_by_id is None
