"""The seed's ``describe("WorkflowRuntime")`` tests, up to ``WorkflowRuntimeContext``, on the
public API.

Each test's docstring starts with the seed title verbatim (see tests/SEED.md). The seed
waits for ``onStatusChange_experimental``; here ``harness.drain()`` (and ``advance()`` for
retry backoffs) runs the instance as far as it goes, and a ``workflow_status_changed``
receiver records what the seed's callback would have seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance
from django_workerflow.signals import workflow_status_changed

pytestmark = pytest.mark.django_db

VERSION = "2026-03-19"
OTHER_VERSION = "2026-03-20"
ONE_DAY = timedelta(days=1)


class StatusRecorder:
    """A ``workflow_status_changed`` receiver: the seed's ``onStatusChange_experimental``."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, str, str | None]] = []

    def __call__(self, sender: Any, instance: WorkflowInstance, **kwargs: Any) -> None:
        self.changes.append((instance.key, kwargs["status"], kwargs["previous_status"]))

    def statuses(self, instance: WorkflowInstance) -> list[str]:
        return [status for key, status, _ in self.changes if key == instance.key]

    def settled(self, instance: WorkflowInstance) -> list[str]:
        """The statuses the seed's callback resolves on (it ignores 'running'; the seed's
        create() announces no 'pending')."""
        return [s for s in self.statuses(instance) if s not in ("pending", "running")]


@pytest.fixture
def status_changes() -> Iterator[StatusRecorder]:
    recorder = StatusRecorder()
    workflow_status_changed.connect(recorder, weak=False)
    yield recorder
    workflow_status_changed.disconnect(recorder)


def step(instance: WorkflowInstance, step_id: str):
    return instance.steps.get(step_id=step_id)


def parent_id(instance: WorkflowInstance, step_id: str) -> str | None:
    parent = step(instance, step_id).parent
    return parent.step_id if parent is not None else None


def attempt_failures(instance: WorkflowInstance, step_id: str) -> int:
    return instance.step_events.filter(step__step_id=step_id, type="attempt_failed").count()


def workflow_event_types(instance: WorkflowInstance) -> list[str]:
    return [event.type for event in instance.workflow_events.all()]


def refreshed(instance: WorkflowInstance) -> WorkflowInstance:
    instance.refresh_from_db()
    return instance


def fail_first_attempt(calls: list[int], value: Any = 1):
    """A step callback that raises on its first call only (a retry backoff follows)."""

    def callback() -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("transient")
        return value

    return callback


# Top level ---------------------------------------------------------------------------


def test_start__creates_the_instance_with_status_pending(workerflow_harness, define):
    """constructor() initializes the database and sets the status to pending

    Python has no per-instance constructor: start() creates the row, pending until a tick.
    """
    definition = define(lambda self: None)

    instance = workerflow.start(definition)

    assert instance.status == "pending"
    assert refreshed(instance).status == "pending"
    assert WorkflowInstance.objects.filter(key=instance.key).exists()


def test_execution__fails_when_the_same_step_id_is_reused_across_run_steps(
    workerflow_harness, define, status_changes
):
    """fails when the same step id is reused across run steps in one execution"""

    def execute(self):
        self.run("step-1", lambda: 1)
        self.run("step-1", lambda: 2)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["failed"]
    assert refreshed(instance).status == "failed"
    assert instance.error_name == "DuplicateStepIdError"
    assert instance.error_message == (
        "DuplicateStepIdError: Step id 'step-1' was already used earlier in this workflow "
        "execution. Steps must be uniquely identified within a single workflow execution."
    )


def test_execution__fails_when_the_same_step_id_is_reused_across_run_and_wait_steps(
    workerflow_harness, define, status_changes
):
    """fails when the same step id is reused across run steps and wait steps in one execution"""

    def execute(self):
        self.run("shared-id", lambda: 1)
        self.wait("shared-id", "event-1")

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["failed"]
    assert refreshed(instance).status == "failed"
    assert instance.error_name == "DuplicateStepIdError"
    assert list(instance.steps.values_list("step_id", "type")) == [("shared-id", "run")]


def test_execution__fails_when_a_step_callback_raises_non_retryable_step_error(
    workerflow_harness, define, status_changes
):
    """fails when a step callback throws 'NonRetryableStepError'"""

    def fail():
        raise workerflow.NonRetryableStepError("This is a non-retryable step error")

    def execute(self):
        self.run("step-1", fail)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["failed"]
    assert refreshed(instance).status == "failed"
    steps = list(instance.steps.all())
    assert len(steps) == 1
    assert steps[0].type == "run"
    assert steps[0].state == "failed"
    assert steps[0].error_message == "NonRetryableStepError: This is a non-retryable step error"
    assert steps[0].error_name == "NonRetryableStepError"
    assert steps[0].attempt_count == 1


def test_execution__fails_when_retries_are_exhausted_on_a_step(
    workerflow_harness, define, status_changes
):
    """fails when retries are exhausted on a step"""

    def fail():
        raise RuntimeError("test")

    def execute(self):
        self.run("step-1", fail, max_attempts=2)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    workerflow_harness.advance(1)  # past the 0.25 s backoff before attempt 2

    assert status_changes.settled(instance) == ["failed"]
    assert refreshed(instance).status == "failed"
    assert instance.error_name == "MaxAttemptsExceededError"
    steps = list(instance.steps.all())
    assert len(steps) == 1
    assert steps[0].type == "run"
    assert steps[0].state == "failed"
    assert steps[0].error_message == "RuntimeError: test"
    assert steps[0].error_name == "RuntimeError"
    assert steps[0].attempt_count == 2


def test_execution__fails_when_execute_raises_an_unhandled_error(
    workerflow_harness, define, status_changes
):
    """fails when execute() throws an unhandled error"""

    def execute(self):
        raise RuntimeError("test")

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["failed"]
    assert refreshed(instance).status == "failed"
    assert instance.error_name == "RuntimeError"
    assert instance.error_message == "RuntimeError: test"


def test_retry__completes_after_a_transient_failure_on_the_first_attempt(
    workerflow_harness, define, status_changes
):
    """retry workflow completes after a transient failure on the first attempt

    The seed also counts two next() calls: a JavaScript detail. Here the callback's calls
    are counted, and the retry takes one tick after the backoff.
    """
    calls: list[int] = []

    def execute(self):
        self.run("step-1", fail_first_attempt(calls, "ok"))

    instance = workerflow.start(define(execute))
    assert workerflow_harness.drain() == 1
    assert refreshed(instance).status == "running"
    assert workerflow_harness.advance(1) == 1

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert len(calls) == 2
    steps = list(instance.steps.all())
    assert len(steps) == 1
    assert steps[0].type == "run"
    assert steps[0].attempt_count == 2
    assert steps[0].state == "succeeded"
    assert steps[0].result == "ok"


def test_wait__with_an_already_passed_timeout_fails_the_workflow_without_an_inbound_event(
    workerflow_harness, define, status_changes
):
    """wait workflow with an already-passed timeout fails without an inbound event"""

    def execute(self):
        self.wait("wait-1", "event-1", timeout_at=self.now() - timedelta(seconds=60))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["failed"]
    assert refreshed(instance).status == "failed"
    assert instance.error_name == "WaitStepTimedOutError"
    assert not instance.inbound_events.exists()
    steps = list(instance.steps.all())
    assert len(steps) == 1
    assert steps[0].type == "wait"
    assert steps[0].state == "timed_out"


def test_execution__runs_sequential_sibling_run_steps_each_once(
    workerflow_harness, define, status_changes
):
    """runs sequential sibling run() steps across multiple next() calls (one callback budget per level per next())

    The seed counts two next() calls (one callback per level per next()): a JavaScript
    detail. Python's tick keeps executing after a step, so both siblings run in one tick;
    each callback runs once.
    """  # noqa: E501 - the first line is the seed title verbatim
    calls: list[str] = []

    def execute(self):
        self.run("step-a", lambda: calls.append("a") or 1)
        self.run("step-b", lambda: calls.append("b") or 2)

    instance = workerflow.start(define(execute))
    assert workerflow_harness.drain() == 1

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert calls == ["a", "b"]
    steps = list(instance.steps.all())
    assert [(s.step_id, s.type, s.state) for s in steps] == [
        ("step-a", "run", "succeeded"),
        ("step-b", "run", "succeeded"),
    ]


def test_execution__chains_a_run_step_and_a_zero_duration_sleep_in_one_tick(
    workerflow_harness, define, status_changes
):
    """chains a run step and a zero-duration sleep in one next() invocation

    The seed counts two next() calls (a JavaScript detail); here the zero sleep elapses
    inside the run step's callback and the whole workflow finishes in one tick.
    """
    calls: list[int] = []

    def execute(self):
        def before_sleep():
            calls.append(1)
            self.sleep("sleep-after-run", 0)
            return 1

        self.run("before-sleep", before_sleep)

    instance = workerflow.start(define(execute))
    assert workerflow_harness.drain() == 1

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert len(calls) == 1
    run_step = step(instance, "before-sleep")
    assert (run_step.type, run_step.state) == ("run", "succeeded")
    sleep_step = step(instance, "sleep-after-run")
    assert (sleep_step.type, sleep_step.state) == ("sleep", "elapsed")
    assert parent_id(instance, "sleep-after-run") == "before-sleep"


# create() -----------------------------------------------------------------------------


def test_start__passes_the_input_to_the_definition_on_each_execute(
    workerflow_harness, define, status_changes
):
    """passes input through to the definition props on each execute()"""
    received: list[Any] = []

    def execute(self):
        received.append(self.input)
        self.run("step-1", lambda: 1)

    data = {"key": "value", "n": 42}
    instance = workerflow.start(define(execute), input=data)
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert len(received) >= 1
    assert all(row == data for row in received)
    assert instance.input == data


def test_start__raises_when_a_non_terminal_instance_is_pinned_to_another_version(
    workerflow_harness, define, status_changes
):
    """throws when the workflow is not terminal and definition version is already pinned to a different version

    The requested version is registered too, so that only the pin refuses it.
    """  # noqa: E501 - the first line is the seed title verbatim

    def execute(self):
        self.wait("wait-1", "event-never", timeout=ONE_DAY)

    definition = define(execute)
    define(execute, name=definition.name, version=OTHER_VERSION)
    instance = workerflow.start(definition, version=VERSION)
    workerflow_harness.drain()
    assert status_changes.statuses(instance)[-1] == "running"

    with pytest.raises(
        workerflow.WorkflowVersionConflictError,
        match=(
            r"^Workflow definition version is already pinned to '2026-03-19' and cannot be "
            r"changed to '2026-03-20'\.$"
        ),
    ):
        workerflow.start(definition.name, key=instance.key, version=OTHER_VERSION)
    assert refreshed(instance).definition_version == VERSION
    assert instance.status == "running"


def test_start__is_a_noop_when_the_instance_is_already_terminal(
    workerflow_harness, define, status_changes
):
    """is a no-op when the workflow is already in a terminal state

    The requested version is registered too, so that only the terminal state matters.
    """

    def execute(self):
        return self.run("step-1", lambda: 1)

    definition = define(execute)
    define(execute, name=definition.name, version=OTHER_VERSION)
    instance = workerflow.start(definition, version=VERSION)
    workerflow_harness.drain()
    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"

    again = workerflow.start(definition.name, key=instance.key, version=OTHER_VERSION)

    assert again.pk == instance.pk
    assert refreshed(instance).status == "completed"
    assert instance.definition_version == VERSION
    assert WorkflowInstance.objects.filter(key=instance.key).count() == 1


# nested run steps ---------------------------------------------------------------------


def test_nested_run__chains_the_parent_across_three_levels(
    workerflow_harness, define, status_changes
):
    """chains parentStepId across three nested run() levels"""

    def execute(self):
        self.run("L0", lambda: self.run("L1", lambda: self.run("L2", lambda: "deep")))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    for step_id, parent in (("L0", None), ("L1", "L0"), ("L2", "L1")):
        row = step(instance, step_id)
        assert (row.type, row.state) == ("run", "succeeded")
        assert parent_id(instance, step_id) == parent
    assert attempt_failures(instance, "L0") == 0
    assert attempt_failures(instance, "L1") == 0


def test_nested_run__a_root_run_after_a_completed_nested_run_has_no_parent(
    workerflow_harness, define, status_changes
):
    """assigns parentStepId null to a root run() that follows a completed nested run()"""

    def execute(self):
        self.run("nest-outer", lambda: self.run("nest-inner", lambda: 1))
        self.run("root-after", lambda: 2)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    root_after = step(instance, "root-after")
    assert (root_after.type, root_after.state) == ("run", "succeeded")
    assert parent_id(instance, "root-after") is None
    assert parent_id(instance, "nest-inner") == "nest-outer"


def test_nested_run__all_branches_with_nested_runs_complete_with_distinct_parent_chains(
    workerflow_harness, define, status_changes
):
    """Promise.all: parallel branches each with nested run() complete and keep distinct parent chains"""  # noqa: E501 - seed title verbatim

    def execute(self):
        return self.all(
            lambda: self.run("branch-a", lambda: self.run("branch-a-inner", lambda: "a")),
            lambda: self.run("branch-b", lambda: self.run("branch-b-inner", lambda: "b")),
        )

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).result == ["a", "b"]
    expected_parents = {
        "branch-a": None,
        "branch-a-inner": "branch-a",
        "branch-b": None,
        "branch-b-inner": "branch-b",
    }
    for step_id, parent in expected_parents.items():
        row = step(instance, step_id)
        assert (row.type, row.state) == ("run", "succeeded")
        assert parent_id(instance, step_id) == parent
    assert attempt_failures(instance, "branch-a") == 0
    assert attempt_failures(instance, "branch-b") == 0


def test_nested_run__all_settled_records_the_parent_of_a_nested_run_while_another_branch_waits(
    workerflow_harness, define, status_changes
):
    """Promise.allSettled: nested run() in one branch still records parentStepId when the other branch waits

    The seed's workflow completes while the wait still waits (allSettled swallows the
    suspension). In Python all_settled keeps the workflow running until the wait is
    satisfied, then it completes.
    """  # noqa: E501 - the first line is the seed title verbatim

    def execute(self):
        self.all_settled(
            lambda: self.run("nested-branch", lambda: self.run("nested-branch-inner", lambda: 99)),
            lambda: self.wait("parallel-wait-nested", "evt-nested-parallel", timeout=ONE_DAY),
        )

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == []
    assert refreshed(instance).status == "running"
    inner = step(instance, "nested-branch-inner")
    assert (inner.type, inner.state) == ("run", "succeeded")
    assert parent_id(instance, "nested-branch-inner") == "nested-branch"
    wait = step(instance, "parallel-wait-nested")
    assert (wait.type, wait.state) == ("wait", "waiting")

    workerflow.send_event(instance, "evt-nested-parallel")
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert step(instance, "parallel-wait-nested").state == "satisfied"
    assert parent_id(instance, "nested-branch-inner") == "nested-branch"


def test_nested_run__records_the_parent_of_a_sleep_inside_a_run(
    workerflow_harness, define, status_changes
):
    """records parentStepId on sleep() nested inside run()"""

    def execute(self):
        self.run("outer-sleep", lambda: self.sleep("deep-sleep", 0))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    deep_sleep = step(instance, "deep-sleep")
    assert (deep_sleep.type, deep_sleep.state) == ("sleep", "elapsed")
    assert parent_id(instance, "deep-sleep") == "outer-sleep"


def test_nested_run__records_the_parent_of_a_wait_inside_a_run_and_completes_after_the_event(
    workerflow_harness, define, status_changes
):
    """records parentStepId on wait() nested inside run() and completes after handleInboundEvent"""

    def execute(self):
        self.run("outer-wait", lambda: self.wait("deep-wait", "deep-event", timeout=ONE_DAY))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    deep_wait = step(instance, "deep-wait")
    assert (deep_wait.type, deep_wait.state) == ("wait", "waiting")
    assert parent_id(instance, "deep-wait") == "outer-wait"

    workerflow.send_event(instance, "deep-event", {"ok": True})
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    deep_wait = step(instance, "deep-wait")
    assert (deep_wait.type, deep_wait.state) == ("wait", "satisfied")
    assert deep_wait.payload == {"ok": True}
    assert parent_id(instance, "deep-wait") == "outer-wait"
    outer = step(instance, "outer-wait")
    assert (outer.type, outer.state) == ("run", "succeeded")


def test_nested_run__fails_the_workflow_when_a_nested_run_raises_non_retryable_step_error(
    workerflow_harness, define, status_changes
):
    """fails the workflow when a nested run() throws NonRetryableStepError"""

    def fail():
        raise workerflow.NonRetryableStepError("inner only")

    def execute(self):
        self.run("fail-outer", lambda: self.run("fail-inner", fail))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["failed"]
    assert refreshed(instance).status == "failed"
    for step_id in ("fail-inner", "fail-outer"):
        row = step(instance, step_id)
        assert (row.type, row.state, row.error_name) == ("run", "failed", "NonRetryableStepError")


# nested run steps > nested error propagation -----------------------------------------


def test_nested_errors__an_inner_retry_records_no_attempt_failed_on_the_outer_run(
    workerflow_harness, define, status_changes
):
    """does not record attempt_failed on the outer run when the inner run suspends for retry, then completes"""  # noqa: E501 - seed title verbatim
    inner_attempts: list[int] = []

    def execute(self):
        self.run(
            "suspend-outer",
            lambda: self.run("suspend-inner", fail_first_attempt(inner_attempts), max_attempts=3),
        )

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    workerflow_harness.advance(1)  # past the inner step's retry backoff

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert len(inner_attempts) == 2
    assert attempt_failures(instance, "suspend-outer") == 0
    outer = step(instance, "suspend-outer")
    assert (outer.type, outer.state) == ("run", "succeeded")
    inner = step(instance, "suspend-inner")
    assert (inner.type, inner.state) == ("run", "succeeded")


def test_nested_errors__fails_the_workflow_when_the_inner_run_exhausts_its_attempts(
    workerflow_harness, define, status_changes
):
    """fails the workflow when the inner run exhausts maxAttempts

    The seed's outer step records a bare 'Error'; in Python the parent fails non-retryably
    with MaxAttemptsExceededError naming the inner step.
    """

    def fail():
        raise RuntimeError("always fail")

    def execute(self):
        self.run("ex-outer", lambda: self.run("ex-inner", fail, max_attempts=1))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["failed"]
    assert refreshed(instance).status == "failed"
    inner = step(instance, "ex-inner")
    assert (inner.type, inner.state) == ("run", "failed")
    assert inner.error_name == "RuntimeError"
    assert inner.error_message == "RuntimeError: always fail"
    outer = step(instance, "ex-outer")
    assert (outer.type, outer.state) == ("run", "failed")
    assert outer.error_name == "MaxAttemptsExceededError"
    assert outer.error_message == (
        "MaxAttemptsExceededError: Run step 'ex-inner' exhausted its configured attempts."
    )
    assert outer.attempt_count == 1


def test_nested_errors__records_the_outer_failure_when_it_raises_after_the_inner_run_succeeded(
    workerflow_harness, define, status_changes
):
    """records the outer run failure when the outer callback throws after the inner run succeeded"""
    inner_calls: list[int] = []

    def inner():
        inner_calls.append(1)
        return 42

    def outer(self):
        self.run("post-inner", inner)
        raise RuntimeError("outer-only failure")

    def execute(self):
        self.run("post-outer", lambda: outer(self))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    # The outer step has the default three attempts: let both backoffs pass.
    workerflow_harness.advance(1)
    workerflow_harness.advance(1)

    assert status_changes.settled(instance) == ["failed"]
    assert refreshed(instance).status == "failed"
    post_inner = step(instance, "post-inner")
    assert (post_inner.type, post_inner.state) == ("run", "succeeded")
    assert len(inner_calls) == 1  # later attempts of the outer step replay the inner result
    post_outer = step(instance, "post-outer")
    assert (post_outer.type, post_outer.state) == ("run", "failed")
    assert "outer-only failure" in post_outer.error_message


def test_nested_errors__a_root_run_suspended_by_a_nested_wait_records_no_attempt_failed(
    workerflow_harness, define, status_changes
):
    """does not record attempt_failed on a root run that only suspends via nested wait (child step explains suspend)"""  # noqa: E501 - seed title verbatim

    def execute(self):
        self.run(
            "root-wait-run", lambda: self.wait("root-deep-wait", "root-deep-ev", timeout=ONE_DAY)
        )

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert step(instance, "root-deep-wait").state == "waiting"
    assert attempt_failures(instance, "root-wait-run") == 0

    workerflow.send_event(instance, "root-deep-ev", True)
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert attempt_failures(instance, "root-wait-run") == 0


# Promise.allSettled -> all_settled ----------------------------------------------------


def test_all_settled__keeps_the_workflow_running_until_the_wait_is_satisfied_then_completes(
    workerflow_harness, define, status_changes
):
    """swallows SuspendWorkflowError so the workflow completes while a wait step is still waiting

    The seed's behaviour is a JavaScript artifact: a workflow must never complete while one
    of its steps still waits. all_settled waits until every branch has settled.
    """
    run_calls: list[int] = []

    def execute(self):
        results = self.all_settled(
            lambda: self.run("parallel-run", lambda: run_calls.append(1) or 1),
            lambda: self.wait("parallel-wait", "parallel-event", timeout=ONE_DAY),
        )
        return [[result.ok, result.value] for result in results]

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == []
    assert refreshed(instance).status == "running"
    assert instance.steps.count() == 2
    run_step = step(instance, "parallel-run")
    assert (run_step.type, run_step.state) == ("run", "succeeded")
    wait = step(instance, "parallel-wait")
    assert (wait.type, wait.state) == ("wait", "waiting")

    workerflow.send_event(instance, "parallel-event", {"answer": 42})
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert instance.result == [[True, 1], [True, {"answer": 42}]]
    assert step(instance, "parallel-wait").state == "satisfied"
    assert len(run_calls) == 1


def test_all_settled__completes_the_workflow_despite_a_non_retryable_branch_failure(
    workerflow_harness, define, status_changes
):
    """swallows NonRetryableStepError so the workflow completes despite a failed run step"""

    def fail():
        raise workerflow.NonRetryableStepError("branch failed")

    def execute(self):
        results = self.all_settled(
            lambda: self.run("parallel-fail", fail),
            lambda: self.run("parallel-ok", lambda: 1),
        )
        return [result.ok for result in results]

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert instance.result == [False, True]
    assert instance.steps.count() == 2
    failed = step(instance, "parallel-fail")
    assert (failed.type, failed.state, failed.error_name) == (
        "run",
        "failed",
        "NonRetryableStepError",
    )
    ok = step(instance, "parallel-ok")
    assert (ok.type, ok.state) == ("run", "succeeded")


def test_all_settled__suspends_the_workflow_even_when_the_caller_reraises_failed_results(
    workerflow_harness, define, status_changes
):
    """forwards suspend when the caller rethrows after inspecting settled results

    In Python the suspension never reaches the settled results: all_settled itself
    suspends while the wait waits, so the caller's re-raise loop only runs once every branch
    has settled. The seed's assertions hold; the event then completes the workflow.
    """

    def execute(self):
        results = self.all_settled(
            lambda: self.run("allsettled-rerun-run", lambda: 1),
            lambda: self.wait("allsettled-rerun-wait", "allsettled-rerun-event", timeout=ONE_DAY),
        )
        for result in results:
            if not result.ok:
                raise result.error

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert refreshed(instance).status == "running"
    assert status_changes.settled(instance) == []
    wait = step(instance, "allsettled-rerun-wait")
    assert (wait.type, wait.state) == ("wait", "waiting")
    run_step = step(instance, "allsettled-rerun-run")
    assert (run_step.type, run_step.state) == ("run", "succeeded")

    workerflow.send_event(instance, "allsettled-rerun-event")
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]


# Promise.all -> all -------------------------------------------------------------------


def test_all__keeps_the_workflow_running_with_a_waiting_branch(
    workerflow_harness, define, status_changes
):
    """propagates SuspendWorkflowError so the workflow stays running with a waiting step

    The seed's run branch may still be mid-flight ('running'); in Python all() lets every
    branch progress in the same tick, so the run has succeeded while the wait waits.
    """

    def execute(self):
        return self.all(
            lambda: self.run("parallel-run", lambda: 1),
            lambda: self.wait("parallel-wait", "parallel-event", timeout=ONE_DAY),
        )

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert refreshed(instance).status == "running"
    assert status_changes.settled(instance) == []
    wait = step(instance, "parallel-wait")
    assert (wait.type, wait.state) == ("wait", "waiting")
    run_step = step(instance, "parallel-run")
    assert (run_step.type, run_step.state) == ("run", "succeeded")

    workerflow.send_event(instance, "parallel-event", "payload")
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).result == [1, "payload"]


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
        match=r"^Cannot resume workflow: expected status 'paused' but got 'pending'\.$",
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
        match=r"^Cannot resume workflow: expected status 'paused' but got 'running'\.$",
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
