"""The transactions step writes run in (django_workerflow/store/transactions.py): a fenced
transaction renews the lease first and stops a worker that lost it; the statement that
starts a run step is chosen by database and transaction; a refused step transition is
explained from the row as it is now."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from django_workerflow.models import WorkflowInstance
from django_workerflow.store import lease, transactions
from django_workerflow.values.clock import now
from django_workerflow.values.control_flow import ExecutionStopped
from django_workerflow.values.states import StepState, StopReason, WorkflowStatus
from tests.support.factories import StepFactory, WorkflowInstanceFactory
from tests.support.instances import claim

pytestmark = pytest.mark.django_db


def test_fenced__renews_the_lease_of_the_worker_that_holds_it():
    instance = WorkflowInstanceFactory()
    claim(instance)
    token = WorkflowInstance.objects.get(pk=instance.pk).lease_token
    later = now() + timedelta(seconds=30)

    with transactions.fenced(lease.Lease(instance.pk, token), later, require_running=True):
        pass

    renewed = WorkflowInstance.objects.get(pk=instance.pk)
    assert renewed.lease_expires_at == lease.expiry(later)


def test_fenced__stops_a_worker_whose_lease_was_taken_and_writes_nothing():
    instance = WorkflowInstanceFactory()
    claim(instance)
    before = WorkflowInstance.objects.get(pk=instance.pk).lease_expires_at
    stale = lease.Lease(instance.pk, "a-token-no-one-holds")

    later = now() + timedelta(seconds=30)
    with (
        pytest.raises(ExecutionStopped) as stopped,
        transactions.fenced(stale, later, require_running=False),
    ):
        pytest.fail("the body of a fenced transaction ran without the lease")

    assert stopped.value.reason == StopReason.LEASE_LOST
    assert WorkflowInstance.objects.get(pk=instance.pk).lease_expires_at == before


def test_fenced__requiring_running_stops_the_holder_of_a_paused_instance():
    instance = WorkflowInstanceFactory()
    claim(instance)
    token = WorkflowInstance.objects.get(pk=instance.pk).lease_token
    WorkflowInstance.objects.filter(pk=instance.pk).update(status=WorkflowStatus.PAUSED)

    holder = lease.Lease(instance.pk, token)
    with (
        pytest.raises(ExecutionStopped) as stopped,
        transactions.fenced(holder, now(), require_running=True),
    ):
        pytest.fail("a paused instance's worker wrote under require_running")

    assert stopped.value.reason == StopReason.NOT_RUNNING


def test_start_new_run_statement__is_named_for_the_database_and_the_renewal():
    if connection.vendor == "postgresql":
        # A django_db test runs inside a transaction: the start keeps its WAL flush there.
        assert transactions.start_new_run_statement(renew=True) == "start_new_run_renewing"
        assert transactions.start_new_run_statement(renew=False) == "start_new_run_checked"
    else:
        assert transactions.start_new_run_statement(renew=True) == "start_new_run_sqlite"
        assert transactions.start_new_run_statement(renew=False) == "start_new_run_sqlite"


def test_explain_refusal__names_a_step_that_is_not_there():
    instance = WorkflowInstanceFactory()

    error = transactions.explain_refusal(instance.pk, "ship", StepState.PENDING, None, now())

    assert str(error) == "Step 'ship' not found in this workflow instance."


def test_explain_refusal__names_the_state_expected_and_the_state_found():
    step = StepFactory(step_id="ship", state=StepState.SUCCEEDED)

    error = transactions.explain_refusal(step.instance_id, "ship", StepState.RUNNING, None, now())

    assert str(error) == (
        "Step 'ship' is in the wrong state: Expected 'running' but got succeeded."
    )


def test_explain_refusal__names_the_attempt_expected_and_the_attempt_found():
    step = StepFactory(step_id="ship", state=StepState.RUNNING, attempt_count=2)

    error = transactions.explain_refusal(step.instance_id, "ship", StepState.RUNNING, 1, now())

    assert str(error) == "Unexpected attempt count for step 'ship': Expected 1 but got 2."


def test_explain_refusal__names_the_time_of_a_retry_not_yet_due():
    due = now() + timedelta(minutes=5)
    step = StepFactory(step_id="ship", state=StepState.PENDING, next_attempt_at=due)

    error = transactions.explain_refusal(step.instance_id, "ship", StepState.PENDING, 0, now())

    assert str(error) == f"Step 'ship' cannot start before its next attempt at {due.isoformat()}."


def test_explain_refusal__of_a_row_that_matches_now_says_it_changed_concurrently():
    step = StepFactory(step_id="ship", state=StepState.PENDING)

    error = transactions.explain_refusal(step.instance_id, "ship", StepState.PENDING, 0, now())

    assert str(error) == "Step 'ship' changed concurrently; try again."
