"""Describing an error never fails, even when the exception's own ``str()`` raises."""

from __future__ import annotations

import contextlib

import pytest

import django_workerflow as workerflow
from django_workerflow import MaxAttemptsExceededError, WorkflowInputError
from django_workerflow.models import Step, StepEvent, StepEventType, StepState, WorkflowStatus

pytestmark = pytest.mark.django_db

UNREADABLE = "UnreadableError (its message could not be read: RuntimeError)"


class UnreadableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message for you")


class NotTextError(Exception):
    def __str__(self):
        return 42


def test_run__an_error_whose_str_raises_is_recorded_on_each_attempt(define, workerflow_harness):
    calls = []

    def fail():
        calls.append(1)
        raise UnreadableError()

    instance = workerflow.start(define(lambda self: self.run("charge", fail, max_attempts=2)))
    workerflow_harness.drain()
    workerflow_harness.advance(60)
    step = Step.objects.get(instance=instance)
    assert (step.state, step.attempt_count, len(calls)) == (StepState.FAILED, 2, 2)
    assert (step.error_name, step.error_message) == ("UnreadableError", UNREADABLE)
    failures = StepEvent.objects.filter(step=step, type=StepEventType.ATTEMPT_FAILED)
    assert [event.error_message for event in failures] == [UNREADABLE, UNREADABLE]
    instance.refresh_from_db()
    assert (instance.status, instance.error_name) == (
        WorkflowStatus.FAILED,
        "MaxAttemptsExceededError",
    )


def test_run__a_replay_that_catches_it_does_not_call_the_callback_again(define, workerflow_harness):
    calls = []

    def fail():
        calls.append(1)
        raise UnreadableError()

    def execute(self):
        with contextlib.suppress(MaxAttemptsExceededError):
            self.run("charge", fail, max_attempts=1)
        self.sleep("later", 10)
        return "done"

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    workerflow_harness.advance(10)
    instance.refresh_from_db()
    assert (instance.status, instance.result, len(calls)) == (WorkflowStatus.COMPLETED, "done", 1)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(UnreadableError, UNREADABLE, id="str-raises"),
        pytest.param(
            NotTextError, "NotTextError (its message could not be read: TypeError)", id="not-str"
        ),
    ],
)
def test_execute__raising_an_error_whose_str_fails_fails_the_workflow_once(
    define, workerflow_harness, error, expected
):
    def execute(self):
        raise error()

    instance = workerflow.start(define(execute))
    assert workerflow_harness.drain() == 1
    instance.refresh_from_db()
    assert (instance.status, instance.error_message) == (WorkflowStatus.FAILED, expected)


class ExplodingList(list):
    def __iter__(self):
        raise KeyError("exploded")


class ExplodingDict(dict):
    def items(self):
        raise UnreadableError()


def test_start__an_input_whose_encoding_raises_is_refused(define, workerflow_harness):
    with pytest.raises(WorkflowInputError, match="workflow input is not JSON-serializable"):
        workerflow.start(define(lambda self: None), input=ExplodingDict(a=1))


def test_run__a_result_whose_encoding_raises_fails_the_step_as_non_retryable(
    define, workerflow_harness
):
    instance = workerflow.start(define(lambda self: self.run("load", lambda: ExplodingList([1]))))
    workerflow_harness.drain()
    step = Step.objects.get(instance=instance)
    assert (step.state, step.attempt_count, step.error_name) == (
        StepState.FAILED,
        1,
        "NonRetryableStepError",
    )
    assert "exploded" in step.error_message
