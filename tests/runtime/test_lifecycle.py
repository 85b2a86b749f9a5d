"""An instance's lifecycle: no alarm once it has ended, pause and resume (and events
sent meanwhile), and the workflow events that record each transition.

Each test's docstring starts with the seed title verbatim (see tests/SEED.md). The seed
waits for ``onStatusChange_experimental``; here ``harness.drain()`` (and ``advance()`` for
retry backoffs) runs the instance as far as it goes, and the ``status_changes`` fixture
records what the seed's callback would have seen.
"""

from __future__ import annotations

from datetime import datetime

import pytest

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance
from tests.support.instances import (
    ONE_DAY,
    fail_first_attempt,
    refreshed,
    step,
    workflow_event_types,
)

pytestmark = pytest.mark.django_db


# alarm() ------------------------------------------------------------------------------


def assert_no_alarm(harness, instance: WorkflowInstance) -> None:
    """The seed's ``runDurableObjectAlarm(stub)`` returning false."""
    assert refreshed(instance).alarm_at is None
    assert harness.drain() == 0
    assert harness.advance(ONE_DAY) == 0


def test_alarm__none_is_scheduled_after_the_workflow_completed(
    workerflow_harness, define, status_changes
):
    """no alarm is scheduled after the workflow has completed"""

    def execute(self):
        return self.run("step-1", lambda: 1)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert status_changes.settled(instance) == ["completed"]

    assert_no_alarm(workerflow_harness, instance)


def test_alarm__none_is_scheduled_after_the_workflow_failed(
    workerflow_harness, define, status_changes
):
    """no alarm is scheduled after the workflow has failed"""

    def execute(self):
        raise RuntimeError("fatal")

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert status_changes.settled(instance) == ["failed"]

    assert_no_alarm(workerflow_harness, instance)


def test_alarm__none_is_scheduled_after_the_workflow_was_cancelled(workerflow_harness, define):
    """no alarm is scheduled after the workflow has been cancelled"""
    instance = workerflow.start(define(lambda self: None))

    workerflow.cancel(instance, reason="test reason")

    assert instance.status == "cancelled"
    assert_no_alarm(workerflow_harness, instance)


# pause and resume ---------------------------------------------------------------------


def test_pause__moves_a_running_workflow_to_paused_and_clears_its_alarm(workerflow_harness, define):
    """pause() transitions running workflow to paused and clears alarm"""

    def execute(self):
        self.wait("wait-1", "never-arrives", timeout=ONE_DAY)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert refreshed(instance).status == "running"
    assert instance.alarm_at is not None  # the wait's deadline
    assert step(instance, "wait-1").state == "waiting"

    assert instance.pause() is True

    assert instance.status == "paused"
    assert refreshed(instance).status == "paused"
    assert_no_alarm(workerflow_harness, instance)
    assert step(instance, "wait-1").state == "waiting"  # its deadline passed while paused


def test_pause__sends_workflow_status_changed_with_paused(
    workerflow_harness, define, status_changes
):
    """pause() fires onStatusChange_experimental with 'paused'"""

    def execute(self):
        self.sleep("sleep-1", 60)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    workerflow.pause(instance)
    # The test's wrapping transaction holds back on-commit signals; the harness releases them.
    workerflow_harness.run_on_commit_callbacks()

    assert status_changes.settled(instance) == ["paused"]
    assert status_changes.changes[-1] == (instance.key, "paused", "running")


def test_pause__is_a_noop_when_pending(workerflow_harness, define):
    """pause() is a no-op when workflow is pending"""
    instance = workerflow.start(define(lambda self: None))
    assert instance.status == "pending"

    assert instance.pause() is False

    assert instance.status == "pending"
    assert refreshed(instance).status == "pending"
    assert workflow_event_types(instance) == ["created"]


def test_pause__is_a_noop_when_already_paused(workerflow_harness, define):
    """pause() is a no-op when workflow is already paused"""

    def execute(self):
        self.sleep("sleep-1", 60)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert refreshed(instance).status == "running"
    instance.pause()
    assert instance.status == "paused"

    assert instance.pause() is False

    assert refreshed(instance).status == "paused"
    assert workflow_event_types(instance) == ["created", "started", "paused"]


def test_resume__moves_a_paused_workflow_back_to_running(
    workerflow_harness, define, status_changes
):
    """resume() transitions paused workflow back to running

    The seed pauses a one-step workflow while it races to run. Here the step fails its first
    attempt, so the instance is genuinely running (waiting for the retry) when it is paused.
    """
    calls: list[int] = []

    def execute(self):
        self.run("step-1", fail_first_attempt(calls))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert refreshed(instance).status == "running"
    instance.pause()
    assert instance.status == "paused"

    instance.resume()

    assert instance.status == "running"
    assert refreshed(instance).status == "running"
    workerflow_harness.advance(1)  # past the retry backoff
    assert status_changes.settled(instance) == ["paused", "completed"]
    assert refreshed(instance).status == "completed"
    assert step(instance, "step-1").state == "succeeded"
    assert len(calls) == 2


def test_resume__raises_when_the_workflow_is_not_paused(workerflow_harness, define):
    """resume() throws when workflow is not paused"""
    instance = workerflow.start(define(lambda self: None))
    assert instance.status == "pending"

    with pytest.raises(
        workerflow.WorkflowStateError,
        match=r"^Cannot resume workflow: expected status 'paused' but got 'pending'\. Instance '",
    ):
        instance.resume()

    assert refreshed(instance).status == "pending"
    assert workflow_event_types(instance) == ["created"]


def test_resume__raises_when_the_workflow_is_running(workerflow_harness, define):
    """resume() throws when workflow is running"""

    def execute(self):
        self.sleep("sleep-1", 60)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert refreshed(instance).status == "running"

    with pytest.raises(
        workerflow.WorkflowStateError,
        match=r"^Cannot resume workflow: expected status 'paused' but got 'running'\. Instance '",
    ):
        instance.resume()

    assert refreshed(instance).status == "running"


def test_send_event__queues_the_event_without_satisfying_the_wait_when_paused(
    workerflow_harness, define
):
    """handleInboundEvent() queues event without satisfying wait step when paused"""

    def execute(self):
        self.wait("wait-1", "event-1")

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert step(instance, "wait-1").state == "waiting"
    instance.pause()
    wait = step(instance, "wait-1")
    assert (wait.type, wait.state) == ("wait", "waiting")

    event = workerflow.send_event(instance, "event-1", {"data": "test"})

    assert event is not None
    assert event.claimed_by is None
    wait = step(instance, "wait-1")
    assert (wait.type, wait.state) == ("wait", "waiting")
    assert workerflow_harness.drain() == 0
    assert step(instance, "wait-1").state == "waiting"


def test_send_event__a_queued_event_is_consumed_after_resume(
    workerflow_harness, define, status_changes
):
    """queued event is consumed after resume()"""

    def execute(self):
        return self.wait("wait-1", "event-1")

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert step(instance, "wait-1").state == "waiting"
    instance.pause()
    event = workerflow.send_event(instance, "event-1", {"data": "test"})

    instance.resume()
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["paused", "completed"]
    assert refreshed(instance).status == "completed"
    assert instance.result == {"data": "test"}
    wait = step(instance, "wait-1")
    assert (wait.type, wait.state) == ("wait", "satisfied")
    assert wait.payload == {"data": "test"}
    event.refresh_from_db()
    assert event.claimed_by_id == wait.pk


def test_tick__does_not_execute_a_paused_workflow(workerflow_harness, define):
    """alarm() does not call run() when paused"""
    executions: list[datetime] = []

    def execute(self):
        executions.append(self.now())
        self.wait("wait-1", "never-arrives", timeout=ONE_DAY)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert refreshed(instance).status == "running"
    assert step(instance, "wait-1").state == "waiting"
    instance.pause()
    assert instance.status == "paused"
    executed = len(executions)

    assert_no_alarm(workerflow_harness, instance)

    assert len(executions) == executed
    assert refreshed(instance).status == "paused"


# getWorkflowEvents_experimental() -> instance.workflow_events --------------------------


def test_workflow_events__records_created_when_the_instance_is_started(workerflow_harness, define):
    """records 'created' when workflow is first initialized"""
    instance = workerflow.start(define(lambda self: None))

    events = list(instance.workflow_events.all())

    assert len(events) == 1
    assert events[0].type == "created"
    assert isinstance(events[0].recorded_at, datetime)


def test_workflow_events__records_started_when_the_workflow_goes_from_pending_to_running(
    workerflow_harness, define, status_changes
):
    """records 'started' when workflow transitions from pending to running"""

    def execute(self):
        self.run("step-1", lambda: 1)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert workflow_event_types(instance) == ["created", "started", "completed"]


def test_workflow_events__records_paused_when_the_workflow_is_paused(workerflow_harness, define):
    """records 'paused' when workflow is paused"""

    def execute(self):
        self.sleep("sleep-1", 60)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert refreshed(instance).status == "running"

    instance.pause()

    assert workflow_event_types(instance) == ["created", "started", "paused"]


def test_workflow_events__records_resumed_when_the_workflow_is_resumed(
    workerflow_harness, define, status_changes
):
    """records 'resumed' when workflow is resumed from paused

    As for resume(), the step fails its first attempt so that the instance is genuinely
    running (waiting for the retry) when it is paused; the seed relies on a race instead.
    """

    calls: list[int] = []

    def execute(self):
        self.run("step-1", fail_first_attempt(calls))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert refreshed(instance).status == "running"
    instance.pause()
    instance.resume()
    workerflow_harness.advance(1)  # past the retry backoff

    assert status_changes.settled(instance) == ["paused", "completed"]
    assert workflow_event_types(instance) == [
        "created",
        "started",
        "paused",
        "resumed",
        "completed",
    ]


def test_workflow_events__records_failed_when_the_workflow_fails(
    workerflow_harness, define, status_changes
):
    """records 'failed' when workflow fails"""

    def fail():
        raise RuntimeError("intentional failure")

    def execute(self):
        self.run("step-1", fail)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    # Three attempts by default: let both backoffs pass.
    workerflow_harness.advance(1)
    workerflow_harness.advance(1)

    assert status_changes.settled(instance) == ["failed"]
    assert workflow_event_types(instance) == ["created", "started", "failed"]


def test_workflow_events__records_cancelled_with_its_reason(workerflow_harness, define):
    """records 'cancelled' with reason when workflow is cancelled"""

    def execute(self):
        self.sleep("sleep-1", 60)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert refreshed(instance).status == "running"

    instance.cancel(reason="user requested cancellation")

    assert workflow_event_types(instance) == ["created", "started", "cancelled"]
    cancelled = instance.workflow_events.get(type="cancelled")
    assert cancelled.reason == "user requested cancellation"


def test_workflow_events__records_cancelled_without_a_reason_when_cancelled_from_pending(
    workerflow_harness, define
):
    """records 'cancelled' without reason when workflow is cancelled from pending"""
    instance = workerflow.start(define(lambda self: None))
    assert instance.status == "pending"

    instance.cancel()

    assert workflow_event_types(instance) == ["created", "cancelled"]
    cancelled = instance.workflow_events.get(type="cancelled")
    assert cancelled.reason is None
