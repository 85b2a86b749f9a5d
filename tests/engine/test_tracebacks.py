"""Tracebacks of failures: kept on every failed attempt and failed instance, the user's
frames only, bounded, storable, and logged with ``exc_info``."""

from __future__ import annotations

import logging

import pytest

import django_workerflow as workerflow
from django_workerflow.values.tracebacks import (
    MAX_TRACEBACK_CHARS,
    bounded,
    format_user_traceback,
    storable_text,
)
from tests.support.instances import refreshed

pytestmark = pytest.mark.django_db


def lookup_price(order):
    return order["items"]["first"]


def test_failed_attempts__keep_their_traceback_with_the_users_frames_only(
    workerflow_harness, define
):
    def execute(self):
        return self.run("price", lambda: lookup_price({"items": [1]}), backoff=lambda n: 0)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    failures = list(instance.step_events.filter(type="attempt_failed").order_by("id"))
    assert len(failures) == 3
    for failure in failures:
        assert failure.traceback.startswith("Traceback (most recent call last):")
        assert 'in lookup_price\n    return order["items"]["first"]' in failure.traceback
        assert failure.traceback.rstrip().endswith(
            "TypeError: list indices must be integers or slices, not str"
        )
        assert "django_workerflow" not in failure.traceback
    others = instance.step_events.exclude(type="attempt_failed")
    assert set(others.values_list("traceback", flat=True)) == {""}


def test_failed_instance__keeps_the_traceback_of_the_failure_that_failed_it(
    workerflow_harness, define
):
    def execute(self):
        order = self.run("load", lambda: {"items": [1]})
        return lookup_price(order)

    instance = refreshed(workerflow.start(define(execute)))
    workerflow_harness.drain()

    instance = refreshed(instance)
    assert instance.status == "failed"
    assert "in execute\n    return lookup_price(order)" in instance.error_traceback
    assert "in lookup_price" in instance.error_traceback
    assert instance.error_traceback.rstrip().endswith("not str")
    assert "django_workerflow" not in instance.error_traceback


def test_failed_instance__traceback_of_a_step_failure_chains_the_steps_own(
    workerflow_harness, define
):
    def execute(self):
        return self.run("price", lambda: lookup_price({"items": [1]}), max_attempts=1)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    text = refreshed(instance).error_traceback
    assert "in lookup_price" in text
    assert "The above exception was the direct cause" in text
    assert text.rstrip().endswith(
        "MaxAttemptsExceededError: Run step 'price' exhausted its configured attempts."
    )


def test_tracebacks__are_bounded_with_a_marker(workerflow_harness, define):
    def execute(self):
        raise ValueError("x" * (3 * MAX_TRACEBACK_CHARS))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    text = refreshed(instance).error_traceback
    assert MAX_TRACEBACK_CHARS <= len(text) <= MAX_TRACEBACK_CHARS + 200
    assert "[traceback truncated: " in text
    assert text.startswith("Traceback (most recent call last):")
    assert text.rstrip().endswith("xxxx")


def test_bounded__leaves_short_text_alone():
    assert bounded("short") == "short"


def test_storable_text__escapes_nul_and_lone_surrogates():
    assert storable_text("a\x00b\ud800c") == "a\\x00b\\ud800c"


def test_format_user_traceback__drops_the_engines_frames_even_without_user_frames():
    from django_workerflow.values import jsonvalue

    try:
        jsonvalue.dumps(object(), what="The value")
    except workerflow.WorkflowInputError as exc:
        text = format_user_traceback(exc)
    assert "jsonvalue.py" not in text
    assert "WorkflowInputError" in text


def test_logged_failures__carry_the_traceback_once_on_the_instances_failure(
    workerflow_harness, define, caplog
):
    def execute(self):
        return self.run("price", lambda: lookup_price({"items": [1]}), max_attempts=1)

    instance = workerflow.start(define(execute))
    with caplog.at_level(logging.INFO, logger="django_workerflow"):
        workerflow_harness.drain()

    failed = {
        record.getMessage().split(" key=")[0]: record
        for record in caplog.records
        if "failed" in record.getMessage()
    }
    assert set(failed) == {"step failed", "workflow failed"}
    # The step's traceback is logged once: chained under the instance's failure.
    assert failed["step failed"].exc_info is None
    workflow_exc = failed["workflow failed"].exc_info
    assert workflow_exc is not None
    assert workflow_exc[0] is workerflow.MaxAttemptsExceededError
    assert workflow_exc[1] is not None
    assert isinstance(workflow_exc[1].__cause__, TypeError)
    assert f"key={instance.key}" in failed["workflow failed"].getMessage()
