"""What enqueue() and validate_task() accept and refuse: arguments, priorities, queues,
run_after, functions."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from django_workerflow.models import WorkflowInstance
from django_workerflow.task_backend import WorkflowTaskBackend, gate_key

from . import tasks
from .framework import (
    SUCCESSFUL,
    InvalidTask,
    default_task_backend,
    task,
    task_backends,
)

ANY_QUEUE = {
    "default": {"BACKEND": "django_workerflow.task_backend.WorkflowTaskBackend", "QUEUES": []}
}


def test_enqueue__arguments_that_are_not_json_raise_type_error(harness):
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.noop.enqueue(datetime.now())
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.noop.enqueue(when=object())
    with pytest.raises(TypeError, match="Unsupported type"):
        async_to_sync(tasks.noop.aenqueue)(datetime.now())
    assert not WorkflowInstance.objects.exists()


def test_enqueue__a_tuple_argument_comes_back_as_a_list(harness):
    result = tasks.noop.enqueue((1, 2), point=(3, 4))

    assert result.args == [[1, 2]]
    assert default_task_backend.get_result(result.id).kwargs == {"point": [3, 4]}


@pytest.mark.parametrize("priority", [-100, 0, 100, 3.0, -7.0], ids=str)
def test_priority__a_whole_number_in_range_is_valid_and_enqueued(harness, priority):
    chosen = tasks.noop.using(priority=priority)

    default_task_backend.validate_task(chosen)
    result = chosen.enqueue()

    assert default_task_backend.get_result(result.id).task.priority == priority


@pytest.mark.parametrize("priority", [-101, 101, 3.1], ids=str)
def test_priority__out_of_range_or_fractional_is_invalid(db, priority):
    with pytest.raises(InvalidTask, match="priority must be a whole number between -100 and 100"):
        tasks.noop.using(priority=priority)


def test_queue__one_the_backend_does_not_list_is_invalid_at_using_and_enqueue(settings, db):
    with pytest.raises(InvalidTask, match="Queue 'queue-2' is not valid for backend"):
        tasks.noop.using(queue_name="queue-2")
    chosen = tasks.noop.using(queue_name="serial")
    settings.TASKS = {
        "default": {
            "BACKEND": "django_workerflow.task_backend.WorkflowTaskBackend",
            "QUEUES": ["queue-1"],
        }
    }
    with pytest.raises(InvalidTask, match="Queue 'serial' is not valid for backend"):
        chosen.enqueue()
    with pytest.raises(InvalidTask, match="Queue 'serial' is not valid for backend"):
        async_to_sync(chosen.aenqueue)()


@pytest.mark.parametrize("length", [1, 230, 255, 1000])
def test_queue__a_name_of_any_length_is_accepted_when_queues_is_empty(settings, db, length):
    settings.TASKS = ANY_QUEUE
    from django_workerflow.testing import Harness

    name = "q" * length
    with Harness() as harness:
        result = tasks.meaning_of_life.using(queue_name=name).enqueue()
        harness.drain()
        read = default_task_backend.get_result(result.id)

    assert read.status == SUCCESSFUL
    assert read.task.queue_name == name
    assert len(gate_key("default", name)) <= 255


def test_queue__long_names_keep_gates_of_their_own():
    first, second = "q" * 300 + "a", "q" * 300 + "b"

    assert gate_key("default", first) != gate_key("default", second)
    assert gate_key("default", "emails") == "django.tasks:default:emails"


def test_run_after__an_aware_time_is_kept_on_the_result(harness):
    when = timezone.now() + timedelta(hours=1)

    result = tasks.noop.using(run_after=when).enqueue()

    assert result.task.run_after == when
    assert default_task_backend.get_result(result.id).task.run_after == when


def test_function__that_is_not_at_module_level_is_invalid(db):
    def nested() -> None:
        pass

    with pytest.raises(InvalidTask, match="Task function must be defined at a module level"):
        task()(nested)


def test_takes_context__without_a_context_argument_is_invalid(db):
    with pytest.raises(InvalidTask, match="does not have a first argument of 'context'"):
        task(takes_context=True)(tasks.meaning_of_life.func)


def test_check__a_configured_backend_reports_nothing(db):
    backend = task_backends["default"]

    assert isinstance(backend, WorkflowTaskBackend)
    assert list(backend.check()) == []


def test_feature_flags__every_one_is_supported():
    backend = task_backends["default"]

    assert backend.supports_defer is True
    assert backend.supports_async_task is True
    assert backend.supports_get_result is True
    assert backend.supports_priority is True
