"""Every limit is a WorkflowInputError that names it, and docs/concepts.md lists each one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import django_workerflow as workerflow
from django_workerflow import WorkflowInputError
from django_workerflow.conf import settings
from django_workerflow.models import Step, WorkflowInstance, WorkflowStatus
from django_workerflow.values import jsonvalue, storable

pytestmark = pytest.mark.django_db

CONCEPTS = Path(__file__).resolve().parent.parent / "docs" / "concepts.md"


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def failure_of(define, harness, execute) -> tuple[str, str]:
    instance = workerflow.start(define(execute))
    harness.drain()
    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.FAILED
    return instance.error_name, instance.error_message


def test_json_size__refused_naming_the_setting(define, workerflow_harness, settings):
    settings.WORKERFLOW_MAX_JSON_BYTES = 100
    with pytest.raises(WorkflowInputError, match="WORKERFLOW_MAX_JSON_BYTES"):
        workerflow.start(define(lambda self: None), input="x" * 200)


def test_json_nesting__the_limit_passes_and_one_more_level_is_refused(define, workerflow_harness):
    definition = define(lambda self: None)
    workerflow.start(definition, input=nested(jsonvalue.MAX_NESTING))
    with pytest.raises(WorkflowInputError, match="JSON nesting limit of 100 levels"):
        workerflow.start(definition, input=nested(jsonvalue.MAX_NESTING + 1))
    assert WorkflowInstance.objects.count() == 1


def test_json_integers__more_digits_than_python_writes_are_refused(define, workerflow_harness):
    with pytest.raises(WorkflowInputError, match=r"workflow input .*4300"):
        workerflow.start(define(lambda self: None), input=10**5000)


def test_instance_key__255_characters_pass_and_256_are_refused(define, workerflow_harness):
    definition = define(lambda self: None)
    workerflow.start(definition, key="k" * 255)
    with pytest.raises(WorkflowInputError, match="the limit is 255"):
        workerflow.start(definition, key="k" * 256)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(lambda self: self.run("s" * 201, lambda: 1), id="step-id"),
        pytest.param(lambda self: self.wait("w", "e" * 201), id="event-name"),
    ],
)
def test_identifiers__201_characters_fail_the_workflow_naming_the_limit(
    define, workerflow_harness, body
):
    name, message = failure_of(define, workerflow_harness, body)
    assert name == "WorkflowInputError"
    assert "the limit is 200" in message


def test_send_event__an_event_name_of_201_characters_is_refused(define, workerflow_harness):
    instance = workerflow.start(define(lambda self: self.wait("w", "go")))
    with pytest.raises(WorkflowInputError, match="the limit is 200"):
        workerflow.send_event(instance, "e" * 201)


def test_max_attempts__above_the_largest_stored_count_fails_the_workflow(
    define, workerflow_harness
):
    name, message = failure_of(
        define,
        workerflow_harness,
        lambda self: self.run("step", lambda: 1, max_attempts=storable.MAX_INTEGER + 1),
    )
    assert name == "WorkflowInputError"
    assert "limit of 2147483647" in message


def test_max_attempts__the_largest_stored_count_is_accepted(define, workerflow_harness):
    instance = workerflow.start(
        define(lambda self: self.run("step", lambda: 1, max_attempts=storable.MAX_INTEGER))
    )
    workerflow_harness.drain()
    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.COMPLETED
    assert Step.objects.get(instance=instance).max_attempts == storable.MAX_INTEGER


def test_durations__longer_than_the_setting_fail_naming_it(define, workerflow_harness):
    days = settings.MAX_DURATION_DAYS + 1
    name, message = failure_of(
        define, workerflow_harness, lambda self: self.sleep("nap", days * 86400)
    )
    assert name == "WorkflowInputError"
    assert "WORKERFLOW_MAX_DURATION_DAYS" in message


def test_docs__the_limits_table_states_the_limits_the_code_enforces():
    section = re.search(r"## Limits\n(.*?)\n## ", CONCEPTS.read_text(), re.DOTALL)
    assert section, "docs/concepts.md has no Limits section"
    table = section.group(1)
    for figure in (
        f"{settings.MAX_JSON_BYTES} bytes",
        f"{jsonvalue.MAX_NESTING} levels",
        "1 to 255 characters",
        f"1 to {jsonvalue.MAX_IDENTIFIER_LENGTH} characters",
        f"1 to {storable.MAX_INTEGER}",
        f"{settings.MAX_DURATION_DAYS} days",
        f"{storable.MAX_ERROR_NAME_LENGTH} characters",
        f"{storable.MAX_ERROR_MESSAGE_LENGTH} characters",
        storable.TRUNCATION_MARKER,
    ):
        assert figure in table, f"the Limits table does not state {figure!r}"
