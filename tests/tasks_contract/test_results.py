"""Enqueue, the result it returns, and reading results back: get_result, refresh and their
async twins, in one query each."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction

from django_workerflow.testing import Harness
from tests.clusterapp import tasks as cluster_tasks

from . import tasks
from .framework import (
    READY,
    SUCCESSFUL,
    Task,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    default_task_backend,
    task_backends,
)

ENQUEUED = [tasks.noop, tasks.noop_async]


@pytest.mark.parametrize("task", ENQUEUED, ids=["sync", "async"])
def test_enqueue__returns_a_ready_result_of_the_task_and_its_arguments(harness, task: Task):
    result = task.enqueue(1, two=3)

    assert result.status == READY
    assert result.is_finished is False
    assert result.started_at is None
    assert result.last_attempted_at is None
    assert result.finished_at is None
    assert result.enqueued_at is not None
    assert result.task == task
    assert result.args == [1]
    assert result.kwargs == {"two": 3}
    assert result.attempts == 0
    assert result.errors == []
    assert result.worker_ids == []
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value


@pytest.mark.parametrize("task", ENQUEUED, ids=["sync", "async"])
def test_aenqueue__is_enqueue_s_async_twin(harness, task: Task):
    result = async_to_sync(task.aenqueue)()

    assert result.status == READY
    assert result.task == task
    assert (result.args, result.kwargs) == ([], {})
    assert default_task_backend.get_result(result.id) == result


@pytest.mark.parametrize("task", ENQUEUED, ids=["sync", "async"])
def test_drain__runs_the_task_to_success_with_its_times_in_order(harness, task: Task):
    result = task.enqueue(1, two=3)
    harness.drain()
    result.refresh()

    assert result.status == SUCCESSFUL
    assert result.is_finished is True
    assert result.return_value is None
    assert result.attempts == 1
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at


def test_return_value__of_a_successful_task(harness):
    result = default_task_backend.enqueue(tasks.meaning_of_life, [], {})
    harness.drain()

    assert default_task_backend.get_result(result.id).return_value == 42


def test_get_result__equals_the_enqueued_result_in_one_query(harness, django_assert_num_queries):
    result = default_task_backend.enqueue(tasks.noop, [], {})

    with django_assert_num_queries(1):
        read = default_task_backend.get_result(result.id)

    assert read == result


def test_get_result__of_a_finished_task_is_one_query(harness, django_assert_num_queries):
    succeeded = tasks.meaning_of_life.enqueue()
    failed = tasks.fails_with_value_error.enqueue()
    harness.drain()

    with django_assert_num_queries(1):
        read_success = default_task_backend.get_result(succeeded.id)
    with django_assert_num_queries(1):
        read_failure = default_task_backend.get_result(failed.id)

    assert read_success.return_value == 42
    [error] = read_failure.errors
    assert error.exception_class is ValueError


def test_get_result__of_a_retried_task_is_one_query_with_every_attempt(
    harness, tmp_path, django_assert_num_queries
):
    result = cluster_tasks.flaky.enqueue(str(tmp_path / "flaky"), 2)  # 3 attempts, 2 fail
    harness.advance(timedelta(minutes=1))

    with django_assert_num_queries(1):
        read = default_task_backend.get_result(result.id)

    assert read.status == SUCCESSFUL
    assert read.attempts == 3
    assert [e.exception_class_path for e in read.errors] == ["builtins.ValueError"] * 2


def test_refresh__reads_the_task_s_progress_in_one_query(harness, django_assert_num_queries):
    result = tasks.meaning_of_life.enqueue()
    harness.drain()
    assert result.status == READY

    with django_assert_num_queries(1):
        result.refresh()

    assert result.status == SUCCESSFUL
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.return_value == 42


def test_refresh__of_an_unchanged_result_changes_nothing(harness):
    result = tasks.noop.enqueue()
    before = dataclasses.asdict(result)

    result.refresh()
    assert dataclasses.asdict(result) == before
    async_to_sync(result.arefresh)()
    assert dataclasses.asdict(result) == before


def test_arefresh_and_aget_result__are_the_async_twins(harness):
    result = tasks.meaning_of_life.enqueue()
    harness.drain()

    async def read() -> tuple[Any, Any]:
        await result.arefresh()
        return result, await tasks.meaning_of_life.aget_result(result.id)

    refreshed, read_back = async_to_sync(read)()

    assert refreshed.return_value == read_back.return_value == 42
    assert read_back == refreshed


@pytest.mark.parametrize(
    "result_id",
    [
        "123",
        "00000000-0000-0000-0000-000000000000",
        "with a \x00 in it",
        "a lone \ud800 surrogate",
        "k" * 300,
    ],
    ids=["short", "uuid", "nul", "surrogate", "too-long"],
)
def test_get_result__of_an_id_no_task_has_raises_does_not_exist(harness, result_id: str):
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(default_task_backend.aget_result)(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        tasks.noop.get_result(result_id)


def test_get_result__through_another_task_raises_mismatch(harness):
    result = default_task_backend.enqueue(tasks.noop_async, [], {})

    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        tasks.noop.get_result(result.id)
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        async_to_sync(tasks.noop.aget_result)(result.id)


@pytest.mark.skipif(not hasattr(Task, "_reconstruct"), reason="the backport's Task does not pickle")
def test_result__pickles_and_reads_back_equal(harness):
    result = tasks.noop.enqueue()

    assert pickle.loads(pickle.dumps(result)) == result


def test_rolled_back_enqueue__leaves_no_result(harness: Harness):
    ids = []

    def view() -> None:
        with transaction.atomic():
            ids.append(tasks.noop.enqueue().id)
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        view()

    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(ids[0])


def test_get_result__reads_only_the_tasks_of_its_own_backend(settings, db):
    settings.TASKS = {
        alias: {"BACKEND": "django_workerflow.task_backend.WorkflowTaskBackend", "QUEUES": []}
        for alias in ("default", "other")
    }
    with Harness():
        on_default = tasks.noop.enqueue()
        on_other = tasks.noop.using(backend="other").enqueue()

        assert on_other.backend == "other"
        assert task_backends["other"].get_result(on_other.id) == on_other
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["other"].get_result(on_default.id)
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["default"].get_result(on_other.id)
