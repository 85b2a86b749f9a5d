"""Starting an instance and running its steps: inputs, version pins, sequential steps,
retries, and the failures that end a workflow (duplicate step ids, non-retryable
errors, exhausted attempts, an expired wait).

Each test's docstring starts with the seed title verbatim (see tests/SEED.md). The seed
waits for ``onStatusChange_experimental``; here ``harness.drain()`` (and ``advance()`` for
retry backoffs) runs the instance as far as it goes, and the ``status_changes`` fixture
records what the seed's callback would have seen.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance
from tests.support.instances import (
    ONE_DAY,
    OTHER_VERSION,
    VERSION,
    fail_first_attempt,
    parent_id,
    refreshed,
    step,
)

pytestmark = pytest.mark.django_db


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
            r"changed to '2026-03-20'\. Instance '"
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
