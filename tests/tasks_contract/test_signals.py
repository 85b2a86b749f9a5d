"""The framework's signals, in order, with their results, and the log lines Django's own
receivers write from them (a failed task's line carries its exception)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import django_workerflow as workerflow
from django_workerflow.task_backend import WorkflowTaskBackend
from tests.clusterapp import tasks as cluster_tasks

from . import tasks
from .framework import FAILED, LOGGER, READY, RUNNING, SUCCESSFUL

try:  # Django 6
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2: the backport
    from django_tasks.signals import task_enqueued, task_finished, task_started


@pytest.fixture
def sent() -> Iterator[list[tuple[str, Any, Any]]]:
    """Every task signal sent during the test: (signal, sender, task result)."""
    received: list[tuple[str, Any, Any]] = []
    receivers = []
    for name, signal in (
        ("enqueued", task_enqueued),
        ("started", task_started),
        ("finished", task_finished),
    ):

        def receive(sender: Any, task_result: Any, name: str = name, **kwargs: Any) -> None:
            received.append((name, sender, task_result))

        signal.connect(receive, weak=False)
        receivers.append((signal, receive))
    yield received
    for signal, receive in receivers:
        signal.disconnect(receive)


def task_logs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER]


def test_signals__enqueued_started_finished_in_order_from_the_backend(harness, sent):
    result = tasks.meaning_of_life.enqueue()
    harness.drain()

    assert [(name, r.status) for name, _sender, r in sent] == [
        ("enqueued", READY),
        ("started", RUNNING),
        ("finished", SUCCESSFUL),
    ]
    assert all(sender is WorkflowTaskBackend for _name, sender, _r in sent)
    assert all(r.id == result.id for _name, _sender, r in sent)
    assert sent[-1][2].return_value == 42


def test_signals__finished_carries_the_failure(harness, sent):
    tasks.fails_with_value_error.enqueue()
    harness.drain()

    name, _sender, finished = sent[-1]
    assert (name, finished.status) == ("finished", FAILED)
    [error] = finished.errors
    assert error.exception_class is ValueError


def test_logs__enqueue_writes_one_line_naming_the_task(harness, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    result = tasks.noop.enqueue()

    [line] = task_logs(caplog)
    assert "enqueued" in line.getMessage()
    assert result.id in line.getMessage()


def test_logs__a_successful_run_writes_running_then_successful_without_none(harness, caplog):
    result = tasks.noop.enqueue()
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    harness.drain()

    lines = task_logs(caplog)
    assert [line.getMessage().rsplit("state=", 1)[1] for line in lines] == [
        "RUNNING",
        "SUCCESSFUL",
    ]
    assert all(result.id in line.getMessage() for line in lines)
    assert not any("None" in line.getMessage() for line in lines)


def test_logs__a_failed_task_s_line_is_an_error_with_its_exception(harness, caplog):
    result = tasks.fails_with_value_error.enqueue()
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    harness.drain()

    running, failed = task_logs(caplog)
    assert "state=RUNNING" in running.getMessage()
    assert "state=FAILED" in failed.getMessage()
    assert result.id in failed.getMessage()
    assert failed.levelno == logging.ERROR
    # task_finished is sent where the exception is being handled: Django's receiver logs it.
    assert failed.exc_info is not None
    assert failed.exc_info[0] is ValueError
    assert "This task failed due to ValueError" in caplog.text


def test_logs__a_return_value_that_is_not_json_is_logged_as_type_error(harness, caplog):
    tasks.returns_a_function.enqueue()
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    harness.drain()

    failed = task_logs(caplog)[-1]
    assert failed.levelno == logging.ERROR
    assert failed.exc_info is not None
    assert failed.exc_info[0] is TypeError


def test_signals__a_cancelled_task_finishes_failed(harness, sent):
    result = tasks.noop.enqueue()

    workerflow.cancel(result.id, reason="not needed")
    harness.run_on_commit_callbacks()

    name, _sender, finished = sent[-1]
    assert (name, finished.id, finished.status, finished.errors) == (
        "finished",
        result.id,
        FAILED,
        [],
    )


def test_logs__a_task_that_succeeds_after_failed_attempts_logs_no_exception(
    harness, caplog, tmp_path
):
    cluster_tasks.flaky.enqueue(str(tmp_path / "flaky"), 2)  # 3 attempts: 2 fail
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    harness.advance(timedelta(minutes=1))

    finished = task_logs(caplog)[-1]
    assert "state=SUCCESSFUL" in finished.getMessage()
    assert finished.levelno == logging.INFO
    assert not finished.exc_info
