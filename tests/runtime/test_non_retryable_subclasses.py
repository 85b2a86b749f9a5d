"""A NonRetryableStepError subclass fails its step like the class itself, on every replay.

The subclass cannot be rebuilt from its name on replay, so the step records (and every run
raises) ``NonRetryableStepError`` whose message starts with the subclass's name.
"""

from __future__ import annotations

import pytest

import django_workerflow as workerflow
from django_workerflow import NonRetryableStepError
from django_workerflow.models import Step, StepState, WorkflowStatus

pytestmark = pytest.mark.django_db


class CardDeclinedError(NonRetryableStepError):
    """A user's own non-retryable failure."""


def catching(step, caught: list[tuple[str, str]]):
    """A body that runs ``step``, notes what it raised, then sleeps so that it replays."""

    def execute(self):
        try:
            step(self)
        except Exception as exc:
            caught.append((type(exc).__name__, str(exc)))
        self.sleep("after", 10)
        return "handled"

    return execute


def declines_on(attempt: int):
    attempts = []

    def charge():
        attempts.append(1)
        if len(attempts) < attempt:
            raise ValueError("network down")
        raise CardDeclinedError("card declined")

    return charge


@pytest.mark.parametrize(
    ("max_attempts", "declined_on"),
    [
        pytest.param(1, 1, id="only-attempt"),
        pytest.param(2, 2, id="last-attempt"),
        pytest.param(3, 1, id="first-of-three"),
    ],
)
def test_run__a_non_retryable_subclass_replays_as_non_retryable_with_its_message(
    define, workerflow_harness, max_attempts, declined_on
):
    caught: list[tuple[str, str]] = []
    charge = declines_on(declined_on)
    body = catching(lambda self: self.run("charge", charge, max_attempts=max_attempts), caught)
    instance = workerflow.start(define(body))
    workerflow_harness.drain()
    workerflow_harness.advance(1)  # the retry, if any
    workerflow_harness.advance(30)  # the sleep
    instance.refresh_from_db()
    assert (instance.status, instance.result) == (WorkflowStatus.COMPLETED, "handled")
    expected = ("NonRetryableStepError", "CardDeclinedError: card declined")
    assert caught == [expected, expected]  # the first run, then the replay after the sleep
    step = Step.objects.get(instance=instance, step_id="charge")
    assert (step.state, step.attempt_count) == (StepState.FAILED, declined_on)
    assert (step.error_name, step.error_message) == (
        "NonRetryableStepError",
        "CardDeclinedError: card declined",
    )


def test_run__an_uncaught_subclass_fails_the_workflow_as_non_retryable(define, workerflow_harness):
    def charge():
        raise CardDeclinedError("card declined")

    instance = workerflow.start(define(lambda self: self.run("charge", charge, max_attempts=1)))
    workerflow_harness.drain()
    instance.refresh_from_db()
    assert (instance.status, instance.error_name, instance.error_message) == (
        WorkflowStatus.FAILED,
        "NonRetryableStepError",
        "NonRetryableStepError: CardDeclinedError: card declined",
    )
