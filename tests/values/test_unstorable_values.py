"""Text the database cannot store: refused before any write, or made safe if it is an error.

A lone UTF-16 surrogate cannot be encoded as UTF-8 (both databases), and PostgreSQL's text
columns refuse NUL; both are refused on both databases alike. Where a user passes such text
(keys, event names, step ids, inputs, payloads, reasons, definition names) the refusal is a
case of the bad-input matrix (tests/reliability/test_bad_input.py); here are the values a
workflow produces, and error text, which is never refused: it is escaped and cut to its
column, because a failure must always be recorded.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import django_workerflow as workerflow
from django_workerflow import NonRetryableStepError, WorkflowInputError
from django_workerflow.models import (
    InboundEvent,
    Step,
    StepEvent,
    StepState,
    WorkflowEvent,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.values.storable import (
    MAX_ERROR_MESSAGE_LENGTH,
    MAX_ERROR_NAME_LENGTH,
    TRUNCATION_MARKER,
    safe_text,
)
from tests.support.bad_values import NUL, SURROGATE
from tests.support.instances import refreshed, waits_for_go

UNSTORABLE = [pytest.param(SURROGATE, id="surrogate"), pytest.param(NUL, id="nul")]

pytestmark = pytest.mark.django_db


def row_counts() -> tuple[int, ...]:
    return tuple(
        model.objects.count()
        for model in (WorkflowInstance, Step, StepEvent, WorkflowEvent, InboundEvent)
    )


# Values at the call sites -------------------------------------------------------------


def test_start__keeps_an_input_holding_nul_as_escaped_json(define, workerflow_harness):
    instance = workerflow.start(define(waits_for_go), input={"a": f"x{NUL}y"})
    assert refreshed(instance).input == {"a": f"x{NUL}y"}


@pytest.fixture
def failed_export(define, workerflow_harness) -> WorkflowInstance:
    def execute(self):
        raise RuntimeError("export failed")

    instance = workerflow.start(define(execute), key="failed")
    workerflow_harness.drain()
    assert refreshed(instance).status == WorkflowStatus.FAILED
    return instance


@pytest.mark.parametrize("bad", UNSTORABLE)
def test_retry__refuses_an_unstorable_reason_and_leaves_the_instance(failed_export, bad):
    before = row_counts()
    with pytest.raises(WorkflowInputError, match="retry reason contains"):
        workerflow.retry(failed_export, reason=f"fixed{bad}")
    assert row_counts() == before
    assert refreshed(failed_export).status == WorkflowStatus.FAILED


@pytest.mark.parametrize("bad", UNSTORABLE)
def test_fork__refuses_an_unstorable_reason_and_creates_nothing(failed_export, bad):
    before = row_counts()
    with pytest.raises(WorkflowInputError, match="fork reason contains"):
        workerflow.fork(failed_export, reason=f"again{bad}")
    assert row_counts() == before


@pytest.mark.parametrize("bad", UNSTORABLE)
def test_wait_result__refuses_an_unstorable_instance_key(waiting, bad):
    with pytest.raises(WorkflowInputError, match="instance key contains"):
        workerflow.wait_result(f"waiting{bad}", timeout=0)


@pytest.mark.parametrize("bad", UNSTORABLE)
def test_start__refuses_an_unstorable_concurrency_key_and_writes_nothing(
    define, workerflow_harness, bad
):
    definition = define(waits_for_go)
    definition.max_concurrency = 1
    definition.concurrency_key = lambda self: f"region{bad}"
    before = row_counts()
    with pytest.raises(WorkflowInputError, match=r"concurrency key .* contains"):
        workerflow.start(definition, key="limited")
    assert row_counts() == before


# Values the workflow produces --------------------------------------------------------


def test_run__a_result_holding_a_lone_surrogate_fails_the_step_as_non_retryable(
    define, workerflow_harness
):
    seen = []

    def execute(self):
        try:
            self.run("answer", lambda: {"text": SURROGATE})
        except NonRetryableStepError as exc:
            seen.append(str(exc))
            raise

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    step = Step.objects.get(instance=instance, step_id="answer")
    assert (step.state, step.attempt_count) == (StepState.FAILED, 1)
    assert refreshed(instance).status == WorkflowStatus.FAILED
    assert refreshed(instance).error_name == "NonRetryableStepError"
    assert "surrogate" in seen[0]


def test_run__an_atomic_result_holding_a_lone_surrogate_fails_the_step(define, workerflow_harness):
    instance = workerflow.start(
        define(lambda self: self.run("answer", lambda: SURROGATE, atomic=True))
    )
    workerflow_harness.drain()
    assert Step.objects.get(instance=instance).state == StepState.FAILED
    assert refreshed(instance).error_name == "NonRetryableStepError"


def test_execute__returning_a_lone_surrogate_fails_the_workflow_once(define, workerflow_harness):
    instance = workerflow.start(define(lambda self: [SURROGATE]))
    assert workerflow_harness.drain() == 1
    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_name == "WorkflowInputError"
    assert "return value" in instance.error_message


# Error text ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", UNSTORABLE)
def test_run__an_error_message_holding_unstorable_text_is_recorded_escaped(
    define, workerflow_harness, bad
):
    def fail():
        raise ValueError(f"bad{bad}input")

    instance = workerflow.start(define(lambda self: self.run("charge", fail, max_attempts=2)))
    workerflow_harness.drain()
    workerflow_harness.advance(60)
    expected = f"ValueError: bad{bad!r}input".replace("'", "")
    step = Step.objects.get(instance=instance)
    assert (step.state, step.attempt_count) == (StepState.FAILED, 2)
    assert step.error_message == expected
    failures = StepEvent.objects.filter(step=step, error_name="ValueError")
    assert [event.error_message for event in failures] == [expected, expected]
    assert refreshed(instance).error_name == "MaxAttemptsExceededError"


@pytest.mark.parametrize("bad", UNSTORABLE)
def test_execute__raising_an_error_with_unstorable_text_fails_the_workflow(
    define, workerflow_harness, bad
):
    def execute(self):
        raise RuntimeError(f"bad{bad}")

    instance = workerflow.start(define(execute))
    assert workerflow_harness.drain() == 1
    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_message == f"RuntimeError: bad{bad!r}".replace("'", "")


def test_run__an_error_class_name_longer_than_its_column_is_recorded_cut(
    define, workerflow_harness
):
    long_error = type("E" * 300, (Exception,), {})

    def fail():
        raise long_error("boom")

    instance = workerflow.start(define(lambda self: self.run("charge", fail, max_attempts=1)))
    workerflow_harness.drain()
    step = Step.objects.get(instance=instance)
    assert step.state == StepState.FAILED
    assert len(step.error_name) == MAX_ERROR_NAME_LENGTH
    assert step.error_name.endswith(TRUNCATION_MARKER)
    assert step.error_message == f"{step.error_name}: boom"
    assert refreshed(instance).error_name == "MaxAttemptsExceededError"


def test_execute__an_error_class_name_longer_than_its_column_fails_the_workflow(
    define, workerflow_harness
):
    long_error = type("E" * 300, (Exception,), {})

    def execute(self):
        raise long_error("boom")

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_name == "E" * (MAX_ERROR_NAME_LENGTH - len(TRUNCATION_MARKER)) + (
        TRUNCATION_MARKER
    )


def test_run__a_huge_error_message_is_cut_with_a_marker(define, workerflow_harness):
    def fail():
        raise ValueError("x" * (MAX_ERROR_MESSAGE_LENGTH * 3))

    instance = workerflow.start(define(lambda self: self.run("charge", fail, max_attempts=1)))
    workerflow_harness.drain()
    message = Step.objects.get(instance=instance).error_message
    assert len(message) == MAX_ERROR_MESSAGE_LENGTH
    assert message.endswith(TRUNCATION_MARKER)


def test_safe_text__escapes_what_cannot_be_stored_and_keeps_the_rest():
    assert safe_text(f"é{SURROGATE}{NUL}ok", max_length=100) == "é\\ud800\\x00ok"


@pytest.mark.parametrize("bad", UNSTORABLE)
@pytest.mark.parametrize("subcommand", ["show", "export", "retry", "cancel", "wake"])
def test_command__refuses_an_unstorable_key_in_one_line(waiting, subcommand, bad):
    with pytest.raises(CommandError, match=r"^The instance key contains"):
        call_command("workerflow", subcommand, f"waiting{bad}")
