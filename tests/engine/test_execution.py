"""``engine.execution.Execution``: one replay pass, driven step helper by step helper.

A pass is built as the tick builds it, on the store of a claimed instance; a second pass
over the same store's rows is a replay. Callbacks count their calls: a recorded step
returns its outcome without running again.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

import pytest

from django_workerflow.engine.execution import Execution
from django_workerflow.exceptions import (
    DuplicateStepIdError,
    MaxAttemptsExceededError,
    NondeterminismError,
    WaitStepTimedOutError,
)
from django_workerflow.models import Step
from django_workerflow.runtime.starting import start
from django_workerflow.store.steps import StepStore
from django_workerflow.values.clock import now
from django_workerflow.values.control_flow import Suspension
from django_workerflow.values.states import StepState

pytestmark = pytest.mark.django_db


def new_pass(store: StepStore, key: str = "unit") -> Execution:
    """A pass as the tick starts one: a fresh store over the recorded rows, loaded."""
    replay_store = StepStore(store.instance_pk, lease_token=store.lease.token, start_child=start)
    replay_store.load()
    return Execution(instance_key=key, store=replay_store, deadline=time.monotonic() + 60)


def test_run__a_new_step_runs_its_callback_and_records_the_result(claimed_store):
    store, instance = claimed_store()
    execution = new_pass(store)

    assert execution.run("charge", lambda: {"charged": 42}) == {"charged": 42}
    execution.flush()

    row = Step.objects.get(instance=instance, step_id="charge")
    assert (row.state, row.result) == (StepState.SUCCEEDED, {"charged": 42})


def test_run__a_replay_returns_the_recorded_result_without_calling_again(claimed_store):
    store, _ = claimed_store()
    calls: Counter[str] = Counter()

    def charge() -> int:
        calls["charge"] += 1
        return calls["charge"]

    first = new_pass(store)
    assert first.run("charge", charge) == 1
    first.flush()

    replay = new_pass(store)
    assert replay.run("charge", charge) == 1
    assert calls["charge"] == 1


def test_run__a_replay_raises_the_recorded_final_failure_without_calling_again(claimed_store):
    store, _ = claimed_store()
    calls: Counter[str] = Counter()

    def fail() -> None:
        calls["fail"] += 1
        raise ValueError("declined")

    with pytest.raises(MaxAttemptsExceededError) as first:
        new_pass(store).run("charge", fail, max_attempts=1)

    with pytest.raises(MaxAttemptsExceededError) as replayed:
        new_pass(store).run("charge", fail, max_attempts=1)
    assert str(replayed.value) == str(first.value)
    assert calls["fail"] == 1


def test_run__a_failed_attempt_with_attempts_left_suspends_until_the_retry(claimed_store):
    store, instance = claimed_store()
    execution = new_pass(store)

    def fail() -> None:
        raise ValueError("transient")

    with pytest.raises(Suspension):
        execution.run("charge", fail, max_attempts=3, backoff=lambda attempt: 60)

    row = Step.objects.get(instance=instance, step_id="charge")
    assert row.state == StepState.PENDING
    assert execution.next_due() == row.next_attempt_at


def test_replay__a_step_recorded_as_another_kind_is_a_nondeterminism_error_naming_it(
    claimed_store,
):
    store, _ = claimed_store()
    first = new_pass(store, key="order-42")
    first.run("charge", lambda: 1)
    first.flush()

    replay = new_pass(store, key="order-42")
    with pytest.raises(NondeterminismError, match="'order-42' reached step 'charge' as a sleep"):
        replay.sleep("charge", 60)
    assert replay.fatal is not None


def test_pass__a_step_id_used_twice_is_a_duplicate_step_id_error(claimed_store):
    store, _ = claimed_store()
    execution = new_pass(store)
    execution.run("a", lambda: 1)

    with pytest.raises(DuplicateStepIdError, match="'a'"):
        execution.run("a", lambda: 2)


def test_sleep__first_reach_records_the_step_and_suspends_until_its_wake_time(claimed_store):
    store, instance = claimed_store()
    execution = new_pass(store)

    with pytest.raises(Suspension):
        execution.sleep("nap", timedelta(minutes=5))

    row = Step.objects.get(instance=instance, step_id="nap")
    assert row.state == StepState.WAITING
    assert execution.next_due() == row.wake_at


def test_sleep__a_replay_after_the_wake_time_marks_it_elapsed_and_goes_on(
    workerflow_harness, claimed_store
):
    store, instance = claimed_store()
    with pytest.raises(Suspension):
        new_pass(store).sleep("nap", timedelta(minutes=1))
    workerflow_harness.clock.advance(timedelta(minutes=1))

    new_pass(store).sleep("nap", timedelta(minutes=5))  # the recorded wake time counts

    assert Step.objects.get(instance=instance, step_id="nap").state == StepState.ELAPSED


def test_wait__without_an_event_suspends_with_no_due_time(claimed_store):
    store, _ = claimed_store()
    execution = new_pass(store)

    with pytest.raises(Suspension):
        execution.wait("approval", "approved", timeout_at=None)

    assert execution.next_due() is None


def test_wait__a_replay_after_its_timeout_raises_wait_step_timed_out(
    workerflow_harness, claimed_store
):
    store, instance = claimed_store()
    with pytest.raises(Suspension):
        new_pass(store).wait("approval", "approved", timeout_at=now() + timedelta(minutes=1))
    workerflow_harness.clock.advance(timedelta(minutes=1))

    with pytest.raises(WaitStepTimedOutError, match="'approval'"):
        new_pass(store).wait("approval", "approved", timeout_at=None)
    assert Step.objects.get(instance=instance, step_id="approval").state == StepState.TIMED_OUT
