"""``runtime.tick.tick``: what a tick claims, and how it settles the pass it ran.

Each test calls ``tick(pk)`` directly (the worker's entry point) under the test harness's
virtual clock, with worker bells silenced, and reads the :class:`TickReport` and the row.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance, WorkflowStatus
from django_workerflow.runtime.tick import UNREGISTERED_RETRY, tick
from django_workerflow.values.states import TickEnding
from tests.support.factories import WorkflowInstanceFactory
from tests.support.instances import fail_first_attempt, refreshed

pytestmark = pytest.mark.django_db


def started(define, execute) -> WorkflowInstance:
    return workerflow.start(define(execute))


# Claiming -------------------------------------------------------------------------------


def test_tick__of_a_deleted_instance_is_missing(workerflow_harness):
    assert tick(2**31 - 1).outcome == TickEnding.MISSING


@pytest.mark.parametrize(
    "status", [WorkflowStatus.COMPLETED, WorkflowStatus.FAILED, WorkflowStatus.PAUSED]
)
def test_tick__of_an_instance_that_is_not_active_leaves_it(workerflow_harness, status):
    instance = WorkflowInstanceFactory(status=status, alarm_at=workerflow_harness.now())

    result = tick(instance.pk)

    assert result.outcome == TickEnding.INACTIVE
    assert refreshed(instance).status == status


def test_tick__before_the_alarm_is_not_due_and_keeps_the_alarm(workerflow_harness, define):
    instance = started(define, lambda self: None)
    later = workerflow_harness.now() + timedelta(hours=1)
    WorkflowInstance.objects.filter(pk=instance.pk).update(alarm_at=later)

    result = tick(instance.pk)

    assert (result.outcome, result.alarm_at) == (TickEnding.NOT_DUE, later)
    assert refreshed(instance).status == WorkflowStatus.PENDING


def test_tick__of_an_instance_leased_by_a_live_worker_is_busy_and_asks_for_one_more_pass(
    workerflow_harness, define
):
    instance = started(define, lambda self: None)
    expires = workerflow_harness.now() + timedelta(seconds=30)
    WorkflowInstance.objects.filter(pk=instance.pk).update(
        status=WorkflowStatus.RUNNING, lease_token=uuid.uuid4().hex, lease_expires_at=expires
    )

    result = tick(instance.pk)

    assert result.outcome == TickEnding.BUSY
    row = refreshed(instance)
    assert row.wake_requested
    assert row.alarm_at == expires  # the next chance, if the holder died


def test_tick__of_an_unregistered_definition_defers_the_instance(workerflow_harness):
    instance = WorkflowInstanceFactory(
        definition_name="no-such-definition", alarm_at=workerflow_harness.now()
    )

    result = tick(instance.pk)

    assert result.outcome == TickEnding.UNREGISTERED
    assert result.alarm_at == workerflow_harness.now() + UNREGISTERED_RETRY
    assert refreshed(instance).status == WorkflowStatus.PENDING


def test_tick__takes_over_an_expired_lease_and_finishes_the_work(workerflow_harness, define):
    instance = started(define, lambda self: "done")
    WorkflowInstance.objects.filter(pk=instance.pk).update(
        status=WorkflowStatus.RUNNING,
        lease_token=uuid.uuid4().hex,
        lease_expires_at=workerflow_harness.now() - timedelta(seconds=1),
    )

    assert tick(instance.pk).outcome == TickEnding.COMPLETED
    assert refreshed(instance).result == "done"


def test_tick__its_first_step_write_keeps_the_lease_the_claim_just_took(
    workerflow_harness, define, settings
):
    settings.WORKERFLOW_LEASE_SECONDS = 60.0
    claimed_at = workerflow_harness.now()
    seen: list[Any] = []

    def execute(self):
        # Engine time passes between the claim and the first step's start.
        workerflow_harness.clock.advance(timedelta(seconds=10))
        self.run("a", lambda: seen.append(refreshed(instance).lease_expires_at))

    instance = started(define, execute)

    assert tick(instance.pk).outcome == TickEnding.COMPLETED
    # The claim's expiry: the start of step "a" did not renew it (it is not due for a
    # quarter lease).
    assert seen == [claimed_at + timedelta(seconds=60)]


# Settling -------------------------------------------------------------------------------


def test_tick__completes_the_workflow_stores_its_result_and_releases_the_lease(
    workerflow_harness, define
):
    instance = started(define, lambda self: self.run("a", lambda: 1) + 1)

    result = tick(instance.pk)

    assert result.outcome == TickEnding.COMPLETED
    row = refreshed(instance)
    assert (row.status, row.result) == (WorkflowStatus.COMPLETED, 2)
    assert (row.lease_token, row.alarm_at) == (None, None)
    assert row.finished_at is not None


def test_tick__fails_the_workflow_with_the_error_that_escaped_execute(workerflow_harness, define):
    def execute(self: Any) -> None:
        raise LookupError("no such order")

    instance = started(define, execute)

    result = tick(instance.pk)

    assert result.outcome == TickEnding.FAILED
    row = refreshed(instance)
    assert (row.status, row.error_name) == (WorkflowStatus.FAILED, "LookupError")
    assert "no such order" in row.error_message
    assert row.lease_token is None


def test_tick__suspends_on_a_sleep_with_the_alarm_at_its_wake_time(workerflow_harness, define):
    instance = started(define, lambda self: self.sleep("nap", 600))

    result = tick(instance.pk)

    wake_at = workerflow_harness.now() + timedelta(seconds=600)
    assert (result.outcome, result.alarm_at) == (TickEnding.SUSPENDED, wake_at)
    row = refreshed(instance)
    assert (row.status, row.alarm_at, row.lease_token) == (WorkflowStatus.RUNNING, wake_at, None)


def test_tick__suspends_on_a_wait_without_an_alarm(workerflow_harness, define):
    instance = started(define, lambda self: self.wait("approval", "approved"))

    result = tick(instance.pk)

    assert (result.outcome, result.alarm_at) == (TickEnding.SUSPENDED, None)
    assert refreshed(instance).alarm_at is None


def test_tick__replays_recorded_steps_without_running_them_again(workerflow_harness, define):
    calls: Counter[str] = Counter()

    def execute(self: Any) -> Any:
        self.run("a", lambda: calls.update(["a"]))
        return self.wait("go", "go")

    instance = started(define, execute)
    assert tick(instance.pk).outcome == TickEnding.SUSPENDED
    workerflow.send_event(instance, "go", "yes")

    result = tick(instance.pk)

    assert result.outcome == TickEnding.COMPLETED
    assert calls == {"a": 1}
    assert refreshed(instance).result == "yes"


def test_tick__a_pass_that_suspends_with_work_due_replays_at_once(workerflow_harness, define):
    calls: list[int] = []
    flaky = fail_first_attempt(calls, value="second attempt")
    instance = started(define, lambda self: self.run("flaky", flaky, backoff=lambda n: 0))

    result = tick(instance.pk)

    assert (result.outcome, result.replays) == (TickEnding.COMPLETED, 2)
    assert refreshed(instance).result == "second attempt"
    assert len(calls) == 2


def test_tick__of_an_instance_paused_while_it_ran_leaves_it_paused(workerflow_harness, define):
    def execute(self: Any) -> None:
        self.run("pause-me", lambda: workerflow.pause(self.key))
        self.run("never", lambda: None)

    instance = started(define, execute)

    result = tick(instance.pk)

    assert result.outcome == TickEnding.STOPPED
    row = refreshed(instance)
    assert row.status == WorkflowStatus.PAUSED
    assert not row.steps.filter(step_id="never").exists()
