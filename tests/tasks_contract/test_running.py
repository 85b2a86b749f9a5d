"""A task's run: statuses, context, async functions, exceptions and return values, as the
framework's backends record them."""

from __future__ import annotations

from datetime import timedelta

import pytest

import django_workerflow as workerflow
from django_workerflow.task_backend import WORKER_NOTE, worker_id
from tests.clusterapp import tasks as cluster_tasks

from . import tasks
from .framework import FAILED, READY, RUNNING, SUCCESSFUL, default_task_backend


def test_statuses__ready_then_running_then_successful(harness, tmp_path):
    seen = []
    result = cluster_tasks.dies_once.enqueue(str(tmp_path / "dies"))
    seen.append(result.status)
    with pytest.raises(cluster_tasks.WorkerDiedError):
        harness.drain()  # its first attempt's worker "dies" mid-attempt
    result.refresh()
    seen.append(result.status)
    harness.advance(timedelta(minutes=5))  # past the dead attempt's lease
    result.refresh()
    seen.append(result.status)

    assert seen == [READY, RUNNING, SUCCESSFUL]


def test_takes_context__the_task_gets_its_own_result_and_attempt(harness):
    own = tasks.own_id.enqueue()
    context = tasks.context_of.enqueue()
    harness.drain()
    own.refresh()
    context.refresh()

    assert own.return_value == own.id
    assert context.return_value == {"is_context": True, "attempt": 1, "status": RUNNING}


def test_async_task__is_awaited_in_the_worker(harness):
    result = tasks.noop_async.enqueue()
    harness.drain()
    result.refresh()

    assert result.status == SUCCESSFUL
    assert result.return_value is None


def test_exception__fails_the_task_with_its_class_and_traceback(harness):
    result = tasks.fails_with_value_error.enqueue()
    harness.drain()
    result.refresh()

    assert result.status == FAILED
    assert result.is_finished is True
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert result.enqueued_at <= result.started_at <= result.finished_at
    [error] = result.errors
    assert error.exception_class is ValueError
    assert error.exception_class_path == "builtins.ValueError"
    # Django's traceback ends with the exception line; ours ends with the note naming the
    # worker (docs/tasks.md, "Deliberate differences").
    assert error.traceback.endswith(
        "ValueError: This task failed due to ValueError\n" + WORKER_NOTE.format(worker_id()) + "\n"
    )


def test_exception__whose_argument_is_an_exception_is_recorded(harness):
    result = tasks.fails_with_an_exception_in_its_argument.enqueue()
    harness.drain()
    result.refresh()

    assert result.status == FAILED
    [error] = result.errors
    assert error.exception_class is ValueError
    assert "ValueError: This task failed" in error.traceback


def test_return_value__that_is_not_json_fails_the_task_with_type_error(harness):
    result = tasks.returns_a_function.enqueue()
    harness.drain()
    result.refresh()

    assert result.status == FAILED
    [error] = result.errors
    assert error.exception_class is TypeError
    assert "Unsupported type" in error.traceback


def test_return_value__keeps_its_json_form(harness):
    result = cluster_tasks.pair.enqueue(value=(1, 2))
    harness.drain()

    assert default_task_backend.get_result(result.id).return_value == [[1, 2], {"value": [1, 2]}]


def test_start__of_a_task_s_definition_says_to_enqueue_the_task(harness):
    tasks.noop.enqueue()  # its definition is registered

    with pytest.raises(workerflow.WorkflowInputError, match=r"enqueue it \(noop\.enqueue"):
        workerflow.start("tests.tasks_contract.tasks.noop", input={"args": []})
    with pytest.raises(workerflow.WorkflowInputError, match=r"is a django\.tasks task"):
        workerflow.start_many("tests.tasks_contract.tasks.noop", [("a-key", None)])
