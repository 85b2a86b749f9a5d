"""The seed's ``WorkflowRuntimeContext`` tests, ported to the production step store.

Each test is one seed ``it(...)`` (its title is the first line of the docstring). The seed's
``new WorkflowRuntimeContext(state.storage)`` is a :class:`StepStore` of an instance that a
tick has claimed through :mod:`django_workerflow.lease`, as every store in production is.
Production creates a run step with its first attempt started, so a seed "pending" run step
is one whose first attempt failed and waits for its retry. The seed's storage alarm is
``WorkflowInstance.alarm_at``, which the tick sets when it settles: the alarm tests drive a
workflow through the harness.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

import django_workerflow as workerflow
from django_workerflow.exceptions import StepStateError, WaitStepTimedOutError
from django_workerflow.models import Step, WorkflowInstance, WorkflowStatus, step_events_of
from django_workerflow.runtime import control
from django_workerflow.runtime.starting import start
from django_workerflow.store.records import StepRecord
from django_workerflow.store.steps import StepStore
from django_workerflow.testing import Harness
from django_workerflow.values.clock import now
from django_workerflow.values.states import StepEventType, StepState, StepType
from tests.support.factories import WorkflowInstanceFactory
from tests.support.instances import claim

RUN, SLEEP, WAIT = StepType.RUN, StepType.SLEEP, StepType.WAIT


@pytest.fixture
def instance(db: None) -> WorkflowInstance:
    return WorkflowInstanceFactory()


@pytest.fixture
def store(instance: WorkflowInstance) -> StepStore:
    """The store of a tick that claimed ``instance`` (now running, leased)."""
    return claim(instance)


# Helpers -------------------------------------------------------------------------------


def fresh_store(store: StepStore) -> StepStore:
    """Another store of the same tick: it reads the steps from the database."""
    return StepStore(store.instance_pk, lease_token=store.lease.token, start_child=start)


def assert_matches(obj: Any, **expected: Any) -> None:
    """Assert that ``obj`` has these attribute values (the seed's ``toMatchObject``)."""
    assert {name: getattr(obj, name) for name in expected} == expected


def assert_step_events(instance: WorkflowInstance, expected: list[dict[str, Any]]) -> None:
    """Assert the instance's step events, in order, each with the keys listed for it.

    ``step_id`` is the step's id string (not the foreign key); every event must carry a
    ``recorded_at`` datetime.
    """
    events = step_events_of(instance)
    actual = [
        {name: event.step.step_id if name == "step_id" else getattr(event, name) for name in keys}
        for event, keys in zip(events, expected, strict=False)
    ]
    assert actual == expected
    assert len(events) == len(expected)
    assert all(isinstance(event.recorded_at, datetime) for event in events)


def alarm_of(instance: WorkflowInstance) -> datetime | None:
    instance.refresh_from_db(fields=["alarm_at"])
    return instance.alarm_at


def start_run_step(
    store: StepStore, step_id: str, *, parent_step_id: str | None = None, max_attempts: int = 3
) -> StepRecord:
    """Create a run step and start its first attempt (one write, as production does)."""
    return store.create_started_run_step(
        step_id, parent_step_id=parent_step_id, max_attempts=max_attempts
    )


def pending_run_step(store: StepStore, step_id: str, **options: Any) -> StepRecord:
    """A run step whose first attempt failed and whose retry is due now."""
    start_run_step(store, step_id, **options)
    return fail_attempt(store, step_id, 1, "first attempt", backoff=lambda attempt: 0)


def fail_attempt(
    store: StepStore, step_id: str, attempt: int, message: str, **kw: Any
) -> StepRecord:
    return store.mark_attempt_failed(
        step_id, attempt, error_name="Error", error_message=message, **kw
    )


def sleep_step(store: StepStore, step_id: str, wake_at: datetime, **options: Any) -> StepRecord:
    return store.sleep_step(step_id, wake_at=wake_at, parent_step_id=options.get("parent_step_id"))


def wait_step(
    store: StepStore, step_id: str, event_name: str, timeout_at: datetime | None = None
) -> StepRecord:
    return store.wait_step(
        step_id, event_name=event_name, timeout_at=timeout_at, parent_step_id=None
    )


def drive(define: Callable[..., Any], harness: Harness, execute: Callable[[Any], Any]) -> Any:
    """Start a workflow of ``execute`` and drain it: the tick sets the alarm as it settles."""
    instance = workerflow.start(define(execute))
    harness.drain()
    return instance


# Run steps: create_started_run_step ---------------------------------------------------


def test_create_started_run_step__creates_a_running_step_with_its_first_attempt(
    store: StepStore,
) -> None:
    """creates a new run step (in production, with its first attempt started)"""
    step = start_run_step(store, "step-1")

    assert_matches(step, step_id="step-1", type=RUN, state=StepState.RUNNING, attempt_count=1)


def test_create_started_run_step__writes_one_row_that_later_reads_return(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """creates a run step once and returns the same durable row on subsequent reads"""
    first = start_run_step(store, "step-1")
    second = store.require("step-1")

    assert first == second
    assert fresh_store(store).require("step-1") == first
    assert instance.steps.count() == 1


def test_require__rereading_a_running_step_writes_no_second_attempt_started_event(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """does not write an 'attempt_started' step event when a run step is already in progress"""
    start_run_step(store, "step-1")
    store.require("step-1")
    fresh_store(store).require("step-1")

    assert_step_events(
        instance,
        [{"type": StepEventType.ATTEMPT_STARTED, "step_id": "step-1", "attempt_number": 1}],
    )


def test_create_started_run_step__persists_max_attempts_on_the_row(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """persists 'max_attempts' on the run step row"""
    step = start_run_step(store, "step-1", max_attempts=5)

    assert_matches(step, step_id="step-1", type=RUN, max_attempts=5)
    assert instance.steps.get(step_id="step-1").max_attempts == 5


# Run steps: has_running_or_waiting_child_steps ------------------------------------------


def test_has_running_or_waiting_child_steps__false_when_the_run_step_has_no_direct_children(
    store: StepStore,
) -> None:
    """returns false when the run step has no direct child rows"""
    start_run_step(store, "leaf", parent_step_id=None)

    assert store.has_running_or_waiting_child_steps("leaf") is False


def test_has_running_or_waiting_child_steps__true_when_the_only_direct_child_run_is_pending(
    store: StepStore,
) -> None:
    """returns true when the only direct child run is still pending"""
    start_run_step(store, "parent", parent_step_id=None)
    pending_run_step(store, "child", parent_step_id="parent")

    assert store.has_running_or_waiting_child_steps("parent") is True


def test_has_running_or_waiting_child_steps__true_when_a_direct_child_run_step_is_running(
    store: StepStore,
) -> None:
    """returns true when a direct child run step is running"""
    start_run_step(store, "parent", parent_step_id=None)
    start_run_step(store, "child", parent_step_id="parent")

    assert store.has_running_or_waiting_child_steps("parent") is True


def test_has_running_or_waiting_child_steps__true_when_a_direct_child_run_is_not_failed(
    store: StepStore,
) -> None:
    """returns true when a direct child run exists in a non-failure state (e.g. pending)"""
    start_run_step(store, "gp", parent_step_id=None)
    pending_run_step(store, "mid", parent_step_id="gp")
    pending_run_step(store, "leaf", parent_step_id="mid")

    assert store.has_running_or_waiting_child_steps("gp") is True


def test_has_running_or_waiting_child_steps__true_with_a_direct_child_and_false_for_a_leaf(
    store: StepStore,
) -> None:
    """returns true when a direct child exists (pending or running) and false for a leaf"""
    start_run_step(store, "mid", parent_step_id=None)
    pending_run_step(store, "leaf", parent_step_id="mid")

    assert store.has_running_or_waiting_child_steps("mid") is True
    assert store.has_running_or_waiting_child_steps("leaf") is False


def test_has_running_or_waiting_child_steps__false_when_the_only_direct_child_run_has_failed(
    store: StepStore,
) -> None:
    """returns false when the only direct child run has failed"""
    start_run_step(store, "par", parent_step_id=None)
    start_run_step(store, "bad-child", parent_step_id="par")
    fail_attempt(store, "bad-child", 1, "x", non_retryable=True)

    assert store.has_running_or_waiting_child_steps("par") is False


def test_has_running_or_waiting_child_steps__true_when_the_only_child_is_a_waiting_sleep(
    store: StepStore,
) -> None:
    """returns true when the only direct child is a non-run step (sleep) in waiting"""
    start_run_step(store, "run-parent", parent_step_id=None)
    wake_at = now() + timedelta(seconds=60)
    sleep_step(store, "child-sleep", wake_at, parent_step_id="run-parent")

    assert store.has_running_or_waiting_child_steps("run-parent") is True


# Run steps: mark_attempt_started (handleRunAttemptEvent running) ------------------------


def test_mark_attempt_started__moves_a_run_step_from_pending_to_running(store: StepStore) -> None:
    """moves a run step from 'pending' to 'running'"""
    pending_run_step(store, "step-1")
    store.mark_attempt_started("step-1", 2)

    updated = store.require("step-1")
    assert_matches(updated, state=StepState.RUNNING, attempt_count=2)
    assert_matches(fresh_store(store).require("step-1"), state="running", attempt_count=2)


def test_mark_attempt_started__writes_an_attempt_started_step_event(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """writes an 'attempt_started' step event when a run step is started"""
    pending_run_step(store, "step-1")
    store.mark_attempt_started("step-1", 2)

    assert_step_events(
        instance,
        [
            {"type": StepEventType.ATTEMPT_STARTED, "step_id": "step-1", "attempt_number": 1},
            {"type": StepEventType.ATTEMPT_FAILED, "step_id": "step-1", "attempt_number": 1},
            {"type": StepEventType.ATTEMPT_STARTED, "step_id": "step-1", "attempt_number": 2},
        ],
    )


def test_mark_attempt_started__throws_when_the_step_does_not_exist(store: StepStore) -> None:
    """throws when the step does not exist"""
    with pytest.raises(StepStateError, match=r"not found"):
        store.mark_attempt_started("nonexistent", 1)


def test_mark_attempt_started__throws_when_the_step_is_not_pending(store: StepStore) -> None:
    """throws when the step is not in 'pending' state"""
    start_run_step(store, "step-1", parent_step_id=None)

    with pytest.raises(StepStateError, match=r"Expected 'pending' but got running"):
        store.mark_attempt_started("step-1", 2)


def test_mark_attempt_started__rejects_when_next_attempt_at_is_in_the_future(
    store: StepStore,
) -> None:
    """rejects when 'next_attempt_at' is in the future"""
    start_run_step(store, "step-1", parent_step_id=None)
    fail_attempt(store, "step-1", 1, "backoff")
    future = now() + timedelta(hours=1)
    Step.objects.filter(instance_id=store.instance_pk, step_id="step-1").update(
        next_attempt_at=future
    )
    store.load()

    with pytest.raises(StepStateError, match=r"next attempt at"):
        store.mark_attempt_started("step-1", 2)


def test_mark_attempt_started__rejects_when_the_attempt_is_not_the_expected_next_one(
    store: StepStore,
) -> None:
    """rejects when 'attemptCount' does not match the expected next attempt"""
    pending_run_step(store, "step-1")

    with pytest.raises(StepStateError, match=r"Expected 98 but got 1"):
        store.mark_attempt_started("step-1", 99)


# Run steps: mark_attempt_succeeded (handleRunAttemptEvent succeeded) --------------------


def test_mark_attempt_succeeded__moves_a_run_step_from_running_to_succeeded(
    store: StepStore,
) -> None:
    """moves a run step from 'running' to 'succeeded'"""
    start_run_step(store, "step-1", parent_step_id=None)
    store.mark_attempt_succeeded("step-1", 1, '{"value":0}')

    updated = store.require("step-1")
    assert_matches(updated, state=StepState.SUCCEEDED, attempt_count=1, result={"value": 0})
    assert isinstance(updated.resolved_at, datetime)
    assert fresh_store(store).require("step-1") == updated


def test_mark_attempt_succeeded__writes_an_attempt_succeeded_step_event(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """writes an 'attempt_succeeded' step event when a run step is succeeded"""
    start_run_step(store, "step-1", parent_step_id=None)
    store.mark_attempt_succeeded("step-1", 1, '{"value":0}')

    assert_step_events(
        instance,
        [
            {"type": StepEventType.ATTEMPT_STARTED, "step_id": "step-1", "attempt_number": 1},
            {"type": StepEventType.ATTEMPT_SUCCEEDED, "step_id": "step-1", "attempt_number": 1},
        ],
    )


def test_mark_attempt_succeeded__throws_when_the_attempt_number_does_not_match(
    store: StepStore,
) -> None:
    """throws when the attempt number does not match"""
    start_run_step(store, "step-1", parent_step_id=None)

    with pytest.raises(StepStateError, match=r"Unexpected attempt count"):
        store.mark_attempt_succeeded("step-1", 999, '{"value":0}')


def test_mark_attempt_succeeded__throws_when_the_step_does_not_exist(store: StepStore) -> None:
    """throws when the step does not exist"""
    with pytest.raises(StepStateError, match=r"not found"):
        store.mark_attempt_succeeded("nonexistent", 1, '{"value":0}')


def test_mark_attempt_succeeded__rejects_when_the_step_is_still_pending(store: StepStore) -> None:
    """rejects when the step is still in 'pending' state"""
    pending_run_step(store, "step-1")

    with pytest.raises(StepStateError, match=r"Expected 'running' but got pending"):
        store.mark_attempt_succeeded("step-1", 1, '{"value":1}')


# Run steps: mark_attempt_failed (handleRunAttemptEvent failed) --------------------------


def test_mark_attempt_failed__moves_a_run_step_from_running_to_failed(store: StepStore) -> None:
    """moves a run step from 'running' to 'failed'"""
    start_run_step(store, "step-1", max_attempts=1, parent_step_id=None)
    fail_attempt(store, "step-1", 1, "error")

    updated = fresh_store(store).require("step-1")
    assert_matches(updated, state=StepState.FAILED, attempt_count=1, error_message="error")


def test_mark_attempt_failed__writes_an_attempt_failed_step_event(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """writes an 'attempt_failed' step event when a run step is failed"""
    start_run_step(store, "step-1", max_attempts=1, parent_step_id=None)
    fail_attempt(store, "step-1", 1, "error")

    assert_step_events(
        instance,
        [
            {"type": StepEventType.ATTEMPT_STARTED, "step_id": "step-1", "attempt_number": 1},
            {
                "type": StepEventType.ATTEMPT_FAILED,
                "step_id": "step-1",
                "attempt_number": 1,
                "error_message": "error",
            },
        ],
    )


def test_mark_attempt_failed__moves_a_run_step_back_to_pending_when_retries_are_available(
    store: StepStore,
) -> None:
    """moves a run step back to 'pending' when retries are available"""
    start_run_step(store, "step-1", parent_step_id=None)
    fail_attempt(store, "step-1", 1, "transient error")

    updated = fresh_store(store).require("step-1")
    assert_matches(updated, state=StepState.PENDING, attempt_count=1)
    assert updated.next_attempt_at is not None
    assert updated.next_attempt_at > now()


def test_mark_attempt_failed__moves_to_failed_when_non_retryable_and_retries_are_available(
    store: StepStore,
) -> None:
    """moves a run step to 'failed' when 'isNonRetryableStepError' is true and retries are available"""  # noqa: E501 - the seed title, verbatim
    start_run_step(store, "step-1", max_attempts=10, parent_step_id=None)
    fail_attempt(store, "step-1", 1, "transient error", non_retryable=True)

    updated = fresh_store(store).require("step-1")
    assert_matches(
        updated, state=StepState.FAILED, attempt_count=1, error_message="transient error"
    )


def test_mark_attempt_failed__schedules_an_alarm_when_retries_are_available(
    define: Callable[..., Any], workerflow_harness: Harness
) -> None:
    """schedules an alarm when retries are available"""

    def execute(self: Any) -> None:
        self.run("step-1", lambda: 1 / 0)

    instance = drive(define, workerflow_harness, execute)

    retry_at = Step.objects.get(step_id="step-1").next_attempt_at
    assert retry_at is not None
    assert retry_at > workerflow_harness.now()
    assert alarm_of(instance) == retry_at


def test_mark_attempt_failed__replaces_an_existing_alarm_when_retries_are_available(
    define: Callable[..., Any], workerflow_harness: Harness
) -> None:
    """replaces an existing alarm when retries are available"""

    def execute(self: Any) -> None:
        self.run("step-1", lambda: 1 / 0)

    # While the tick runs, the alarm is its lease expiry; settling replaces it.
    instance = drive(define, workerflow_harness, execute)

    alarm = alarm_of(instance)
    assert alarm is not None
    assert alarm == Step.objects.get(step_id="step-1").next_attempt_at
    assert alarm < workerflow_harness.now() + timedelta(seconds=1)


def test_mark_attempt_failed__writes_an_attempt_failed_step_event_when_retrying(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """writes an 'attempt_failed' step event when retrying"""
    start_run_step(store, "step-1", parent_step_id=None)
    fail_attempt(store, "step-1", 1, "transient error")

    assert_step_events(
        instance,
        [
            {"type": StepEventType.ATTEMPT_STARTED, "step_id": "step-1", "attempt_number": 1},
            {
                "type": StepEventType.ATTEMPT_FAILED,
                "step_id": "step-1",
                "attempt_number": 1,
                "error_message": "transient error",
            },
        ],
    )


def test_mark_attempt_failed__throws_when_the_attempt_number_does_not_match(
    store: StepStore,
) -> None:
    """throws when the attempt number does not match"""
    start_run_step(store, "step-1", parent_step_id=None)

    with pytest.raises(StepStateError, match=r"Unexpected attempt count"):
        fail_attempt(store, "step-1", 999, "error")


def test_mark_attempt_failed__throws_when_the_step_does_not_exist(store: StepStore) -> None:
    """throws when the step does not exist"""
    with pytest.raises(StepStateError, match=r"not found"):
        fail_attempt(store, "nonexistent", 1, "error")


def test_mark_attempt_failed__uses_backoff_delay_for_next_attempt_when_retrying(
    store: StepStore,
) -> None:
    """uses backoff delay for next attempt when retrying"""
    before = now()
    start_run_step(store, "step-1", parent_step_id=None)
    fail_attempt(store, "step-1", 1, "transient error")
    after = now()

    updated = fresh_store(store).require("step-1")
    assert_matches(updated, state=StepState.PENDING, attempt_count=1)
    assert updated.next_attempt_at >= before + timedelta(milliseconds=250)
    assert updated.next_attempt_at <= after + timedelta(milliseconds=500 + 100)


def test_mark_attempt_failed__rejects_when_the_step_is_still_pending(store: StepStore) -> None:
    """rejects when the step is still in 'pending' state"""
    pending_run_step(store, "step-1")

    with pytest.raises(StepStateError, match=r"Expected 'running' but got pending"):
        fail_attempt(store, "step-1", 1, "bad")


# Sleep steps: sleep_step ----------------------------------------------------------------


def test_sleep_step__creates_a_waiting_sleep_step_with_its_wake_time(store: StepStore) -> None:
    """creates a sleep step"""
    wake_at = now() + timedelta(seconds=60)

    step = sleep_step(store, "sleep-1", wake_at)

    assert_matches(step, step_id="sleep-1", type=SLEEP, state=StepState.WAITING, wake_at=wake_at)


def test_sleep_step__writes_one_row_that_later_calls_and_reads_return(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """creates a sleep step once and returns the same durable row on subsequent reads"""
    first = sleep_step(store, "sleep-1", now())
    second = sleep_step(store, "sleep-1", now())

    assert first == second
    assert sleep_step(fresh_store(store), "sleep-1", now()) == first
    assert instance.steps.count() == 1


def test_sleep_step__writes_a_sleep_waiting_step_event(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """writes a 'sleep_waiting' step event"""
    wake_at = now()

    sleep_step(store, "sleep-1", wake_at)

    assert_step_events(
        instance,
        [{"type": StepEventType.SLEEP_WAITING, "step_id": "sleep-1", "wake_at": wake_at}],
    )


def test_sleep__sets_the_instance_alarm_to_the_wake_time(
    define: Callable[..., Any], workerflow_harness: Harness
) -> None:
    """schedules an alarm"""
    instance = drive(define, workerflow_harness, lambda self: self.sleep("sleep-1", 60))

    assert alarm_of(instance) == workerflow_harness.now() + timedelta(seconds=60)


def test_sleep__a_later_sleep_replaces_the_earlier_alarm(
    define: Callable[..., Any], workerflow_harness: Harness
) -> None:
    """replaces any existing alarm with a new alarm"""

    def execute(self: Any) -> None:
        self.sleep("first", 600)
        self.sleep("sleep-1", 60)

    instance = drive(define, workerflow_harness, execute)
    assert alarm_of(instance) == workerflow_harness.now() + timedelta(seconds=600)

    workerflow_harness.advance(600)

    assert alarm_of(instance) == workerflow_harness.now() + timedelta(seconds=60)


def test_sleep__an_elapsed_sleep_leaves_no_alarm(
    define: Callable[..., Any], workerflow_harness: Harness
) -> None:
    """does not schedule an alarm when an existing sleep step has a past wake_at"""

    def execute(self: Any) -> None:
        self.sleep("sleep-1", 10)
        self.wait("forever", "never")

    instance = drive(define, workerflow_harness, execute)
    workerflow_harness.advance(10)

    assert Step.objects.get(step_id="sleep-1").wake_at <= workerflow_harness.now()
    assert alarm_of(instance) is None


def test_sleep_step__a_second_call_writes_no_second_sleep_waiting_event(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """does not append a second sleep_waiting step_events row when the sleep step already exists"""
    wake_at = now() + timedelta(seconds=30)
    sleep_step(store, "sleep-1", wake_at)
    sleep_step(store, "sleep-1", wake_at)

    assert_step_events(
        instance,
        [{"type": StepEventType.SLEEP_WAITING, "step_id": "sleep-1", "wake_at": wake_at}],
    )


def test_sleep__replaying_an_elapsed_sleep_sets_no_alarm(
    define: Callable[..., Any], workerflow_harness: Harness
) -> None:
    """does not set an alarm when re-reading an already elapsed sleep step"""

    def execute(self: Any) -> None:
        self.sleep("sleep-1", 60)
        self.wait("forever", "never")

    instance = drive(define, workerflow_harness, execute)
    workerflow_harness.advance(60)
    assert Step.objects.get(step_id="sleep-1").state == StepState.ELAPSED

    control.wake(instance)
    assert workerflow_harness.drain() == 1

    assert alarm_of(instance) is None


# Sleep steps: mark_sleep_elapsed (handleSleepStepEvent elapsed) -------------------------


def test_mark_sleep_elapsed__moves_a_sleep_step_from_waiting_to_elapsed(store: StepStore) -> None:
    """moves a sleep step from 'waiting' to 'elapsed'"""
    sleep_step(store, "sleep-1", now())
    store.mark_sleep_elapsed("sleep-1")

    updated = sleep_step(store, "sleep-1", now())
    assert updated.state == StepState.ELAPSED
    assert isinstance(updated.resolved_at, datetime)
    assert fresh_store(store).require("sleep-1").state == StepState.ELAPSED


def test_mark_sleep_elapsed__writes_a_sleep_elapsed_step_event(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """writes a 'sleep_elapsed' step event when a sleep step is elapsed"""
    wake_at = now() + timedelta(seconds=60)
    sleep_step(store, "sleep-1", wake_at)
    store.mark_sleep_elapsed("sleep-1")

    assert_step_events(
        instance,
        [
            {"type": StepEventType.SLEEP_WAITING, "step_id": "sleep-1", "wake_at": wake_at},
            {"type": StepEventType.SLEEP_ELAPSED, "step_id": "sleep-1"},
        ],
    )


def test_mark_sleep_elapsed__throws_when_the_step_does_not_exist(store: StepStore) -> None:
    """throws when the step does not exist"""
    with pytest.raises(StepStateError, match=r"not found"):
        store.mark_sleep_elapsed("nonexistent")


def test_mark_sleep_elapsed__throws_when_the_step_is_already_elapsed(store: StepStore) -> None:
    """throws when the step is already elapsed"""
    sleep_step(store, "sleep-1", now())
    store.mark_sleep_elapsed("sleep-1")

    with pytest.raises(StepStateError, match=r"Expected 'waiting' but got elapsed"):
        store.mark_sleep_elapsed("sleep-1")


# Wait steps: wait_step ------------------------------------------------------------------


def test_wait_step__creates_a_waiting_step_without_a_timeout(
    store: StepStore,
) -> None:
    """creates a wait step when no timeout is provided"""
    step = wait_step(store, "wait-1", "event-1")

    assert_matches(step, step_id="wait-1", type=WAIT, state=StepState.WAITING, event_name="event-1")
    assert step.timeout_at is None


def test_wait_step__creates_a_waiting_step_with_its_timeout(
    store: StepStore,
) -> None:
    """creates a wait step when a timeout is provided"""
    timeout_at = now() + timedelta(seconds=60)

    step = wait_step(store, "wait-1", "event-1", timeout_at)

    assert_matches(
        step,
        step_id="wait-1",
        type=WAIT,
        state=StepState.WAITING,
        event_name="event-1",
        timeout_at=timeout_at,
    )


def test_wait_step__writes_a_wait_waiting_step_event(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """writes a 'wait_waiting' step event"""
    timeout_at = now() + timedelta(seconds=60)

    wait_step(store, "wait-1", "event-1", timeout_at)

    assert_step_events(
        instance,
        [
            {
                "type": StepEventType.WAIT_WAITING,
                "step_id": "wait-1",
                "event_name": "event-1",
                "timeout_at": timeout_at,
            }
        ],
    )


def test_wait_step__writes_one_row_that_later_calls_and_reads_return(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """creates a wait step once and returns the same durable row on subsequent reads"""

    def read(from_store: StepStore) -> Any:
        return wait_step(
            from_store,
            "wait-1",
            "event-1",
            now() + timedelta(seconds=60),
        )

    first = read(store)
    second = read(store)

    assert first == second
    assert read(fresh_store(store)) == first
    assert instance.steps.count() == 1


def test_wait__with_a_timeout_sets_the_instance_alarm_to_it(
    define: Callable[..., Any], workerflow_harness: Harness
) -> None:
    """schedules an alarm when a timeout is provided"""
    instance = drive(
        define, workerflow_harness, lambda self: self.wait("wait-1", "event-1", timeout=60)
    )

    assert alarm_of(instance) == workerflow_harness.now() + timedelta(seconds=60)


def test_wait__with_a_timeout_replaces_the_earlier_alarm(
    define: Callable[..., Any], workerflow_harness: Harness
) -> None:
    """replaces any existing alarm with a new alarm when a timeout is provided"""

    def execute(self: Any) -> None:
        self.sleep("first", 600)
        self.wait("wait-1", "event-1", timeout=60)

    instance = drive(define, workerflow_harness, execute)
    workerflow_harness.advance(600)

    assert alarm_of(instance) == workerflow_harness.now() + timedelta(seconds=60)


def test_wait__without_a_timeout_leaves_no_alarm(
    define: Callable[..., Any], workerflow_harness: Harness
) -> None:
    """doesn't schedule an alarm when no timeout is provided"""
    instance = drive(define, workerflow_harness, lambda self: self.wait("wait-1", "event-1"))

    assert alarm_of(instance) is None


def test_wait__replay_keeps_the_recorded_timeout_for_the_alarm_not_the_new_one(
    define: Callable[..., Any], workerflow_harness: Harness
) -> None:
    """uses the stored timeout_at for the alarm, not the caller-provided timeoutAt"""
    instance = drive(
        define, workerflow_harness, lambda self: self.wait("wait-1", "event-1", timeout=60)
    )
    original_timeout = workerflow_harness.now() + timedelta(seconds=60)

    # A replay 30 s later reaches the wait with the same timeout: the stored one stands.
    workerflow_harness.clock.advance(timedelta(seconds=30))
    control.wake(instance)
    assert workerflow_harness.drain() == 1

    assert alarm_of(instance) == original_timeout


def test_wait__a_passed_timeout_leaves_no_alarm(
    define: Callable[..., Any], workerflow_harness: Harness
) -> None:
    """does not schedule an alarm when an existing wait step has a past timeout_at"""

    def execute(self: Any) -> None:
        try:
            self.wait("wait-1", "event-1", timeout=10)
        except WaitStepTimedOutError:
            self.wait("forever", "never")

    instance = drive(define, workerflow_harness, execute)
    workerflow_harness.advance(10)
    assert Step.objects.get(step_id="wait-1").state == StepState.TIMED_OUT

    assert alarm_of(instance) is None


# Wait steps: send_event (handleInboundEvent) --------------------------------------------


def get_wait(store: StepStore, step_id: str = "wait-1") -> Any:
    return wait_step(store, step_id, "event-1")


def test_send_event__moves_a_wait_step_from_waiting_to_satisfied_when_the_event_is_delivered(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """moves a wait step from 'waiting' to 'satisfied' when event is delivered"""
    get_wait(store)

    workerflow.send_event(instance, "event-1", "payload")

    updated = get_wait(store)
    assert_matches(updated, state=StepState.SATISFIED, payload="payload")
    assert isinstance(updated.resolved_at, datetime)


def test_send_event__writes_a_wait_satisfied_step_event_when_a_wait_step_is_satisfied(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """writes a 'wait_satisfied' step event when a wait step is satisfied"""
    get_wait(store)

    workerflow.send_event(instance, "event-1", "payload")

    assert_step_events(
        instance,
        [
            {"type": StepEventType.WAIT_WAITING, "step_id": "wait-1", "event_name": "event-1"},
            {"type": StepEventType.WAIT_SATISFIED, "step_id": "wait-1", "payload": "payload"},
        ],
    )


def test_send_event__queues_the_event_when_no_matching_wait_step_exists(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """queues the event when no matching wait step exists"""
    workerflow.send_event(instance, "event-1", "queued-payload")

    step = get_wait(store)

    assert_matches(step, state=StepState.SATISFIED, payload="queued-payload")


def test_send_event__queued_events_are_consumed_in_fifo_order_by_several_waits(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """consumes queued inbound events in FIFO order when several waits are created"""
    workerflow.send_event(instance, "event-1", "first")
    workerflow.send_event(instance, "event-1", "second")

    step1 = get_wait(store, "wait-1")
    step2 = get_wait(store, "wait-2")

    assert_matches(step1, state=StepState.SATISFIED, payload="first")
    assert_matches(step2, state=StepState.SATISFIED, payload="second")


def test_send_event__satisfies_the_earliest_matching_wait_step_when_several_are_waiting(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """satisfies the earliest matching wait step when multiple are waiting"""
    get_wait(store, "wait-1")
    get_wait(store, "wait-2")

    workerflow.send_event(instance, "event-1", "payload")

    step1 = get_wait(store, "wait-1")
    step2 = get_wait(store, "wait-2")
    assert_matches(step1, state=StepState.SATISFIED, payload="payload")
    assert_matches(step2, state=StepState.WAITING)


def test_send_event__does_not_change_steps_when_the_workflow_is_terminal(
    workerflow_harness: Harness, define: Callable[..., Any]
) -> None:
    """does not change steps when the workflow is terminal"""

    def execute(self: Any) -> None:
        self.run("step-1", lambda: 1)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.COMPLETED
    steps_before = list(instance.steps.values())
    events_before = list(instance.step_events.values())

    delivered = workerflow.send_event(instance, "event-1", {"ignored": True})

    assert delivered is None
    assert list(instance.steps.values()) == steps_before
    assert list(instance.step_events.values()) == events_before


# Wait steps: mark_wait_timed_out (handleWaitStepEvent timed_out) ------------------------


def test_mark_wait_timed_out__moves_a_wait_step_from_waiting_to_timed_out(
    store: StepStore,
) -> None:
    """moves a wait step from 'waiting' to 'timed_out'"""
    timeout_at = now() - timedelta(seconds=1)
    wait_step(store, "wait-1", "event-1", timeout_at)
    store.mark_wait_timed_out("wait-1")

    updated = wait_step(store, "wait-1", "event-1", timeout_at)
    assert updated.state == StepState.TIMED_OUT
    assert isinstance(updated.resolved_at, datetime)
    assert fresh_store(store).require("wait-1").state == StepState.TIMED_OUT


def test_mark_wait_timed_out__writes_a_wait_timed_out_step_event(
    instance: WorkflowInstance, store: StepStore
) -> None:
    """writes a 'wait_timed_out' step event when a wait step is timed out"""
    timeout_at = now() - timedelta(seconds=1)
    wait_step(store, "wait-1", "event-1", timeout_at)
    store.mark_wait_timed_out("wait-1")

    assert_step_events(
        instance,
        [
            {
                "type": StepEventType.WAIT_WAITING,
                "step_id": "wait-1",
                "event_name": "event-1",
                "timeout_at": timeout_at,
            },
            {"type": StepEventType.WAIT_TIMED_OUT, "step_id": "wait-1"},
        ],
    )


def test_mark_wait_timed_out__throws_when_the_step_does_not_exist(store: StepStore) -> None:
    """throws when the step does not exist"""
    with pytest.raises(StepStateError, match=r"not found"):
        store.mark_wait_timed_out("nonexistent")


def test_mark_wait_timed_out__throws_when_the_step_is_already_timed_out(store: StepStore) -> None:
    """throws when the step is already timed out"""
    wait_step(
        store,
        "wait-1",
        "event-1",
        now() - timedelta(seconds=1),
    )
    store.mark_wait_timed_out("wait-1")

    with pytest.raises(StepStateError, match=r"Expected 'waiting' but got timed_out"):
        store.mark_wait_timed_out("wait-1")
