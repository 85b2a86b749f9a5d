"""The fencing invariant, as django_workerflow.lease states it, tested clause by clause.

Worker A claims an instance and starts work; its lease expires and worker B takes the
instance over. A is the stale worker: it must not start anything new or settle the tick,
while the outcome of the attempt it already started is fenced by the step row alone.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_workerflow.engine.execution import (
    INTERRUPTED_ERROR_NAME,
    INTERRUPTED_MESSAGE,
    Execution,
)
from django_workerflow.models import Step, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime.tick import PassReport, _settle
from django_workerflow.store.steps import StepStore
from django_workerflow.values.clock import now
from django_workerflow.values.control_flow import ExecutionStopped
from django_workerflow.values.states import PassEnding, StepState, StopReason, TickEnding
from tests.support.factories import WorkflowInstanceFactory
from tests.support.instances import claim, take_over

pytestmark = pytest.mark.django_db


@pytest.fixture
def instance() -> WorkflowInstance:
    return WorkflowInstanceFactory()


@pytest.fixture
def stale(instance: WorkflowInstance) -> StepStore:
    return claim(instance)


def test_fencing__stale_worker_records_the_success_of_its_attempt_if_not_yet_interrupted(
    instance, stale
):
    stale.create_started_run_step("charge", parent_step_id=None, max_attempts=3)
    take_over(instance)

    stale.mark_attempt_succeeded("charge", 1, '"paid"')

    step = Step.objects.get(step_id="charge")
    assert (step.state, step.result, step.attempt_count) == (StepState.SUCCEEDED, "paid", 1)


def test_fencing__stale_worker_loses_once_the_new_owner_recorded_the_interruption(instance, stale):
    stale.create_started_run_step("charge", parent_step_id=None, max_attempts=3)
    owner = take_over(instance)
    owner.mark_attempt_failed(
        "charge", 1, error_name=INTERRUPTED_ERROR_NAME, error_message=INTERRUPTED_MESSAGE
    )

    with pytest.raises(ExecutionStopped) as stopped:
        stale.mark_attempt_succeeded("charge", 1, '"paid"')

    assert stopped.value.reason == StopReason.LEASE_LOST
    step = Step.objects.get(step_id="charge")
    assert (step.state, step.error_name, step.result) == (
        StepState.PENDING,
        INTERRUPTED_ERROR_NAME,
        None,
    )


def test_fencing__the_new_owner_loses_if_the_stale_worker_recorded_its_success_first(
    instance, stale
):
    stale.create_started_run_step("charge", parent_step_id=None, max_attempts=3)
    owner = take_over(instance)
    stale.mark_attempt_succeeded("charge", 1, '"paid"')

    with pytest.raises(Exception, match="Expected 'running' but got succeeded"):
        owner.mark_attempt_failed(
            "charge", 1, error_name=INTERRUPTED_ERROR_NAME, error_message=INTERRUPTED_MESSAGE
        )

    assert Step.objects.get(step_id="charge").state == StepState.SUCCEEDED


def test_fencing__stale_worker_cannot_record_a_failure(instance, stale):
    stale.create_started_run_step("charge", parent_step_id=None, max_attempts=3)
    take_over(instance)

    with pytest.raises(ExecutionStopped) as stopped:
        stale.mark_attempt_failed("charge", 1, error_name="ValueError", error_message="no")

    assert stopped.value.reason == StopReason.LEASE_LOST
    assert Step.objects.get(step_id="charge").state == StepState.RUNNING


def test_fencing__stale_worker_cannot_start_a_new_attempt(instance, stale):
    stale.create_started_run_step("charge", parent_step_id=None, max_attempts=3)
    stale.mark_attempt_failed(
        "charge", 1, error_name="ValueError", error_message="no", backoff=lambda attempt: 0
    )
    take_over(instance)

    with pytest.raises(ExecutionStopped) as stopped:
        stale.mark_attempt_started("charge", 2)

    assert stopped.value.reason == StopReason.LEASE_LOST
    step = Step.objects.get(step_id="charge")
    assert (step.state, step.attempt_count) == (StepState.PENDING, 1)


@pytest.mark.parametrize("kind", ["run", "sleep", "wait"])
def test_fencing__stale_worker_cannot_create_a_step(instance, stale, kind):
    take_over(instance)

    create = {
        "run": lambda: stale.create_started_run_step("new", parent_step_id=None, max_attempts=3),
        "sleep": lambda: stale.sleep_step("new", wake_at=now(), parent_step_id=None),
        "wait": lambda: stale.wait_step(
            "new", event_name="go", timeout_at=None, parent_step_id=None
        ),
    }[kind]

    with pytest.raises(ExecutionStopped) as stopped:
        create()

    assert stopped.value.reason == StopReason.LEASE_LOST
    assert not Step.objects.filter(step_id="new").exists()


def test_fencing__the_lease_holder_cannot_start_work_once_the_instance_left_running(
    instance, stale
):
    WorkflowInstance.objects.filter(pk=instance.pk).update(status=WorkflowStatus.PAUSED)

    with pytest.raises(ExecutionStopped) as stopped:
        stale.create_started_run_step("new", parent_step_id=None, max_attempts=3)

    assert stopped.value.reason == StopReason.NOT_RUNNING
    assert not Step.objects.filter(step_id="new").exists()


def test_fencing__stale_worker_cannot_settle_the_tick(instance, stale):
    owner = take_over(instance)
    before = WorkflowInstance.objects.get(pk=instance.pk)

    execution = Execution(
        instance_key=instance.key, store=stale, deadline=1e18, interrupted_suspects=set()
    )
    passed = PassReport(PassEnding.COMPLETED, result_json="1")

    result = _settle(
        instance, stale.lease.token, execution, passed, 1, stale.progress, stale.attributes
    )

    assert result is not None
    assert result.outcome == TickEnding.STOPPED
    after = WorkflowInstance.objects.get(pk=instance.pk)
    assert (after.status, after.lease_token, after.alarm_at, after.result) == (
        before.status,
        owner.lease.token,
        before.alarm_at,
        None,
    )


def test_fencing__a_renewal_moves_the_alarm_only_while_running(instance, stale):
    WorkflowInstance.objects.filter(pk=instance.pk).update(
        status=WorkflowStatus.PAUSED, alarm_at=None
    )
    with connection.cursor() as cursor:
        renewed = stale.lease.renew(cursor, connection.ops.adapt_datetimefield_value, now())

    paused = WorkflowInstance.objects.get(pk=instance.pk)
    assert renewed
    assert paused.alarm_at is None
    assert paused.lease_expires_at > now()
