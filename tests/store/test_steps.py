"""``store.steps.StepStore``: what its writes leave in the database, and what it reads back.

Each store belongs to a tick holding the instance's lease (the ``claimed_store`` fixture);
its writes are fenced by that lease and by the instance being running.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from django_workerflow.models import (
    Step,
    WorkflowInstance,
    WorkflowStatus,
    step_events_of,
)
from django_workerflow.runtime.starting import start
from django_workerflow.store.steps import StepStore
from django_workerflow.values import jsonvalue
from django_workerflow.values.clock import now
from django_workerflow.values.control_flow import ExecutionStopped
from django_workerflow.values.states import StepEventType, StepState, StepType, StopReason
from tests.support.factories import WorkflowInstanceFactory

pytestmark = pytest.mark.django_db


def events(instance: WorkflowInstance, step_id: str) -> list[str]:
    return [event.type for event in step_events_of(instance) if event.step.step_id == step_id]


def test_create_started_run_step__writes_a_running_row_and_its_attempt_started_event(
    claimed_store,
):
    store, instance = claimed_store()

    record = store.create_started_run_step("charge", parent_step_id=None, max_attempts=4)

    row = Step.objects.get(instance=instance, step_id="charge")
    assert (row.type, row.state, row.attempt_count, row.max_attempts) == (
        StepType.RUN,
        StepState.RUNNING,
        1,
        4,
    )
    assert record.pk == row.pk
    assert events(instance, "charge") == [StepEventType.ATTEMPT_STARTED]


def test_load__reads_back_every_recorded_step_by_its_id(claimed_store):
    store, instance = claimed_store()
    store.create_started_run_step("a", parent_step_id=None, max_attempts=3)
    store.sleep_step("nap", wake_at=now() + timedelta(hours=1), parent_step_id=None)

    steps = StepStore(instance.pk, lease_token=store.lease.token, start_child=start).load()

    assert {step_id: record.type for step_id, record in steps.items()} == {
        "a": StepType.RUN,
        "nap": StepType.SLEEP,
    }


def test_load__reads_a_nested_step_with_its_parent_step_id(claimed_store):
    store, instance = claimed_store()
    store.create_started_run_step("outer", parent_step_id=None, max_attempts=3)
    store.create_started_run_step("inner", parent_step_id="outer", max_attempts=3)

    steps = StepStore(instance.pk, lease_token=store.lease.token, start_child=start).load()

    assert steps["inner"].parent_step_id == "outer"
    assert steps["outer"].parent_step_id is None


def test_defer_success__is_written_only_by_the_next_flush(claimed_store):
    store, instance = claimed_store()
    store.create_started_run_step("charge", parent_step_id=None, max_attempts=3)

    record = store.defer_success("charge", 1, jsonvalue.dumps({"ok": True}, what="result"))

    assert record.state == StepState.SUCCEEDED  # in memory
    assert Step.objects.get(instance=instance, step_id="charge").state == StepState.RUNNING
    store.flush()
    row = Step.objects.get(instance=instance, step_id="charge")
    assert (row.state, row.result) == (StepState.SUCCEEDED, {"ok": True})
    assert events(instance, "charge") == [
        StepEventType.ATTEMPT_STARTED,
        StepEventType.ATTEMPT_SUCCEEDED,
    ]


def test_flush__without_a_deferred_success_writes_nothing(claimed_store):
    store, instance = claimed_store()

    store.flush()

    assert not Step.objects.filter(instance=instance).exists()


def test_mark_attempt_failed__with_attempts_left_leaves_the_step_pending_until_its_backoff(
    claimed_store,
):
    store, instance = claimed_store()
    store.create_started_run_step("charge", parent_step_id=None, max_attempts=3)

    record = store.mark_attempt_failed(
        "charge", 1, error_name="ValueError", error_message="declined", backoff=lambda n: 30
    )

    row = Step.objects.get(pk=record.pk)
    assert row.state == StepState.PENDING
    assert row.next_attempt_at is not None
    assert timedelta(seconds=29) <= row.next_attempt_at - now() <= timedelta(seconds=30)
    assert events(instance, "charge")[-1] == StepEventType.ATTEMPT_FAILED


def test_mark_attempt_failed__on_the_last_attempt_fails_the_step(claimed_store):
    store, _ = claimed_store()
    store.create_started_run_step("charge", parent_step_id=None, max_attempts=1)

    record = store.mark_attempt_failed("charge", 1, error_name="E", error_message="boom")

    row = Step.objects.get(pk=record.pk)
    assert (row.state, row.error_name) == (StepState.FAILED, "E")


def test_record_patch_marker__writes_a_succeeded_patch_step_holding_the_answer(claimed_store):
    store, instance = claimed_store()

    store.record_patch_marker("patch:new-tax", applied=True, parent_step_id=None)

    row = Step.objects.get(instance=instance, step_id="patch:new-tax")
    assert (row.type, row.state, row.result) == (StepType.PATCH, StepState.SUCCEEDED, True)


def test_writes__of_a_store_whose_lease_was_taken_stop_with_lease_lost(claimed_store):
    store, instance = claimed_store()
    WorkflowInstance.objects.filter(pk=instance.pk).update(lease_token=uuid.uuid4().hex)

    with pytest.raises(ExecutionStopped) as stopped:
        store.create_started_run_step("charge", parent_step_id=None, max_attempts=3)

    assert stopped.value.reason == StopReason.LEASE_LOST
    assert not Step.objects.filter(instance=instance).exists()


def test_writes__of_an_instance_no_longer_running_stop_with_not_running(claimed_store):
    store, instance = claimed_store()
    WorkflowInstance.objects.filter(pk=instance.pk).update(status=WorkflowStatus.PAUSED)

    with pytest.raises(ExecutionStopped) as stopped:
        store.create_started_run_step("charge", parent_step_id=None, max_attempts=3)

    assert stopped.value.reason == StopReason.NOT_RUNNING
    assert not Step.objects.filter(instance=instance).exists()


def test_sleep_step__a_second_call_returns_the_recorded_step_without_a_write(claimed_store):
    store, instance = claimed_store()
    wake_at = now() + timedelta(minutes=5)
    first = store.sleep_step("nap", wake_at=wake_at, parent_step_id=None)

    again = store.sleep_step("nap", wake_at=wake_at + timedelta(days=1), parent_step_id=None)

    assert again.pk == first.pk
    assert again.wake_at == wake_at
    assert Step.objects.filter(instance=instance).count() == 1


def test_stores__are_per_instance(claimed_store):
    store, instance = claimed_store()
    other = WorkflowInstanceFactory()
    store.create_started_run_step("a", parent_step_id=None, max_attempts=3)

    assert StepStore(other.pk, lease_token="unused", start_child=start).load() == {}
    assert set(StepStore(instance.pk, lease_token="unused", start_child=start).load()) == {"a"}
