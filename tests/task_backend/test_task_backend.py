"""The django.tasks backend through the framework's public API, on the test harness.

Tasks are enqueued with ``Task.enqueue()``, read back with ``get_result()`` and
``refresh()``, and run by ``drain()``/``advance()`` at virtual time; the real-worker cases
(a killed worker, a deferred task's bell, priorities on a worker) are in
tests/cluster/test_task_backend_cluster.py.
"""

from __future__ import annotations

import inspect
import io
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import transaction

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition
from django_workerflow.models import WorkflowInstance
from django_workerflow.task_backend import WorkflowTaskBackend, worker_id
from django_workerflow.testing import Harness
from tests.clusterapp import tasks
from tests.support.admin import change_url, changelist_url, text

try:  # Django 6
    from django.tasks import TaskResultStatus, task, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus, task, task_backends
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

READY = TaskResultStatus.READY
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def named_too_long() -> None:
    """A module-level function whose module path is over the engine's 200 characters."""


named_too_long.__name__ = named_too_long.__qualname__ = "too_long_" + "x" * 200


def clashes_with_a_workflow() -> None:
    """A module-level function whose module path a workflow definition has as its name."""


class NamedLikeATask(WorkflowDefinition):
    name = f"{__name__}.clashes_with_a_workflow"
    version = "1"

    def execute(self) -> None:
        pass


# Enqueue and results ---------------------------------------------------------------------


def test_enqueue__returns_a_ready_result_whose_id_is_the_instance_key(harness):
    result = tasks.add.enqueue(2, 3)

    assert result.status == READY
    assert result.args == [2, 3]
    assert result.kwargs == {}
    assert result.enqueued_at == harness.now()
    assert result.started_at is None
    assert result.attempts == 0
    assert result.backend == "default"
    instance = WorkflowInstance.objects.get(key=result.id)
    assert instance.definition_name == "tests.clusterapp.tasks.add"
    assert len(result.id) < 64
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value


def test_drain__runs_the_task_and_refresh_reads_its_outcome(harness):
    result = tasks.pair.enqueue(value=7)
    harness.drain()

    result.refresh()

    assert result.status == SUCCESSFUL
    assert result.return_value == [7, {"value": 7}]  # the JSON round trip: a list
    assert result.started_at == result.last_attempted_at == harness.now()
    assert result.finished_at == harness.now()
    assert result.worker_ids == [worker_id()]
    assert result.attempts == 1
    assert result.errors == []
    assert result.kwargs == {"value": 7}


def test_get_result__reads_the_task_from_the_database(harness):
    enqueued = tasks.add.enqueue(1, 1)
    harness.drain()

    read = tasks.add.get_result(enqueued.id)
    by_backend = task_backends["default"].get_result(enqueued.id)

    assert read.status == by_backend.status == SUCCESSFUL
    assert read.return_value == 2
    assert read.task.func is tasks.add.func


def test_get_result__of_an_unknown_id_raises_result_does_not_exist(harness):
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("no-such-task")


def test_get_result__of_a_workflow_that_is_not_a_task_raises_result_does_not_exist(harness):
    workflow = workerflow.start("cluster-probe", key="not-a-task")

    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(workflow.key)


def test_aenqueue_and_aget_result__are_the_async_twins(harness):
    async def enqueue_and_read() -> tuple[Any, Any]:
        result = await tasks.add.aenqueue(4, 5)
        return result, await tasks.add.aget_result(result.id)

    enqueued, read = async_to_sync(enqueue_and_read)()
    harness.drain()
    read.refresh()

    assert enqueued.id == read.id
    assert read.return_value == 9


def test_async_task__a_coroutine_runs_in_the_worker(harness):
    result = tasks.async_add.enqueue(20, 22)
    harness.drain()
    result.refresh()

    assert result.status == SUCCESSFUL
    assert result.return_value == 42


def test_takes_context__passes_the_result_and_the_attempt_number(harness):
    result = tasks.with_context.enqueue("hello")
    harness.drain()
    result.refresh()

    assert result.return_value == {"id": result.id, "attempt": 1, "label": "hello"}


def test_takes_context__a_retried_attempt_sees_its_number_and_the_failed_one_s_error(
    harness, tmp_path
):
    path = tmp_path / "attempts"
    result = tasks.flaky_with_context.enqueue(str(path))  # the "retries" queue: 3 attempts
    harness.advance(timedelta(minutes=1))
    result.refresh()

    assert lines(path) == ["1", "2"]  # what context.attempt said in each attempt
    assert result.status == SUCCESSFUL
    assert result.return_value == {"attempt": 2, "errors": 1}
    [error] = result.errors
    assert error.exception_class_path == "builtins.ValueError"


# Feature flags: each is True, and what it promises holds ------------------------------------


def test_supports_defer__a_run_after_task_starts_on_its_time_never_before(harness, tmp_path):
    assert task_backends["default"].supports_defer is True
    path = tmp_path / "stamp"
    when = harness.now() + timedelta(minutes=10)
    result = tasks.stamp.using(run_after=when).enqueue(str(path))

    harness.advance(timedelta(minutes=9, seconds=59, milliseconds=999))
    assert lines(path) == []
    harness.advance(timedelta(milliseconds=1))
    result.refresh()

    assert result.status == SUCCESSFUL
    assert result.started_at == when
    assert result.task.run_after == when


def test_supports_priority__larger_runs_sooner_and_the_result_keeps_it(harness, tmp_path):
    assert task_backends["default"].supports_priority is True
    path = tmp_path / "order"
    tasks.hold.enqueue(str(path), 0)  # takes the "serial" queue's one slot
    lowest = tasks.record.using(priority=-100).enqueue(str(path), "lowest")
    highest = tasks.record.using(priority=100).enqueue(str(path), "highest")
    harness.drain()

    assert [line.split()[0] for line in lines(path)] == ["hold", "highest", "lowest"]
    assert tasks.record.get_result(highest.id).task.priority == 100
    assert tasks.record.get_result(lowest.id).task.priority == -100


def test_supports_async_task__a_coroutine_task_is_accepted_and_awaited(harness, tmp_path):
    assert task_backends["default"].supports_async_task is True
    assert inspect.iscoroutinefunction(tasks.async_stamp.func)
    path = tmp_path / "async"
    result = tasks.async_stamp.enqueue(str(path))
    harness.drain()
    result.refresh()

    assert result.status == SUCCESSFUL
    assert result.return_value[1] == 1  # the coroutine ran to its end, once
    assert len(lines(path)) == 1


def test_supports_get_result__any_result_is_read_back_by_its_id(harness):
    assert task_backends["default"].supports_get_result is True
    enqueued = tasks.add.enqueue(2, 40)
    assert tasks.add.get_result(enqueued.id).status == READY
    harness.drain()

    read = task_backends["default"].get_result(enqueued.id)

    assert read.id == enqueued.id
    assert read.status == SUCCESSFUL
    assert read.return_value == 42
    assert read.args == [2, 40]


# Failures and retries ----------------------------------------------------------------------


def test_failure__is_failed_with_the_exception_class_path_and_traceback(harness):
    result = tasks.boom.enqueue("no luck")
    harness.drain()
    result.refresh()

    assert result.status == FAILED
    assert result.attempts == 1  # the framework's default: one attempt
    [error] = result.errors
    assert error.exception_class_path == "tests.clusterapp.tasks.TaskBoomError"
    assert error.exception_class is tasks.TaskBoomError
    assert "raise TaskBoomError(message)" in error.traceback
    assert "no luck" in error.traceback
    assert result.finished_at == harness.now()
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_retries__a_queue_s_max_attempts_retries_after_the_engine_s_backoff(harness, tmp_path):
    path = tmp_path / "flaky"
    result = tasks.flaky.enqueue(str(path), 2)  # the "retries" queue: 3 attempts
    harness.drain()
    result.refresh()

    assert len(lines(path)) == 1
    assert result.status == READY  # between attempts, waiting for the backoff
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"]

    harness.advance(timedelta(seconds=0.25))  # the engine's first backoff
    harness.advance(timedelta(seconds=0.5))
    result.refresh()

    assert len(lines(path)) == 3
    assert result.status == SUCCESSFUL
    assert result.return_value == 3
    assert result.attempts == 3
    assert result.worker_ids == [worker_id()] * 3  # failed attempts name theirs too
    assert len(result.errors) == 2
    assert result.last_attempted_at > result.started_at


def test_interrupted_attempt__runs_again_and_does_not_use_up_the_one_attempt(harness, tmp_path):
    path = tmp_path / "dies"
    result = tasks.dies_once.enqueue(str(path))
    with pytest.raises(tasks.WorkerDiedError):
        harness.drain()
    assert tasks.dies_once.get_result(result.id).status == RUNNING  # until its lease expires

    harness.advance(timedelta(minutes=5))  # past the dead attempt's lease
    result.refresh()

    assert result.status == SUCCESSFUL
    assert result.return_value == 2
    assert result.attempts == 2
    assert result.worker_ids == ["", worker_id()]  # the dead attempt recorded no worker
    assert result.errors == []


def test_retries__a_task_that_keeps_failing_fails_after_max_attempts(harness, tmp_path):
    path = tmp_path / "flaky"
    result = tasks.flaky.enqueue(str(path), 10)
    harness.advance(timedelta(minutes=1))
    result.refresh()

    assert len(lines(path)) == 3
    assert result.status == FAILED
    assert len(result.errors) == 3


def test_options__max_attempts_and_backoff_apply_to_every_queue(settings, db, tmp_path):
    settings.TASKS = {
        "default": {
            "BACKEND": "django_workerflow.task_backend.WorkflowTaskBackend",
            "QUEUES": ["default", "serial", "retries", "rated"],
            "OPTIONS": {"max_attempts": 2, "backoff": lambda attempt: timedelta(minutes=5)},
        }
    }
    path = tmp_path / "flaky"
    with Harness() as harness:
        result = tasks.flaky.enqueue(str(path), 1)
        harness.advance(timedelta(minutes=4, seconds=59))
        assert len(lines(path)) == 1
        harness.advance(timedelta(seconds=1))
        result.refresh()

    assert len(lines(path)) == 2
    assert result.status == SUCCESSFUL


def test_options__a_bad_value_is_refused_with_every_problem(settings):
    with pytest.raises(ImproperlyConfigured, match=r"max_attempts.*max_concurrency") as caught:
        WorkflowTaskBackend(
            "bad",
            {
                "QUEUES": ["default"],
                "OPTIONS": {
                    "max_attempts": 0,
                    "queues": {"default": {"max_concurrency": -1}},
                },
            },
        )
    assert "misconfigured" in str(caught.value)


def test_cancel__a_cancelled_task_is_failed(harness):
    result = tasks.add.enqueue(1, 2)

    workerflow.cancel(result.id, reason="not needed")
    result.refresh()

    assert result.status == FAILED
    assert result.errors == []


def test_retry__the_engine_s_retry_reruns_a_failed_task(harness, tmp_path):
    path = tmp_path / "flaky"
    result = tasks.flaky.using(queue_name="default").enqueue(str(path), 1)
    harness.drain()
    result.refresh()
    assert result.status == FAILED

    workerflow.retry(result.id, reason="fixed")
    harness.drain()
    result.refresh()

    assert result.status == SUCCESSFUL
    assert result.return_value == 2


# Validation ----------------------------------------------------------------------------


def test_validate_task__refuses_a_function_that_is_not_module_level(db):
    def local() -> None:
        pass

    with pytest.raises(InvalidTask, match="module level"):
        task()(local)


def test_validate_task__refuses_an_unknown_queue(db):
    with pytest.raises(InvalidTask, match="nowhere"):
        tasks.add.using(queue_name="nowhere")


def test_validate_task__refuses_a_priority_out_of_range(db):
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=101)


def test_validate_task__refuses_a_naive_run_after(db):
    with pytest.raises(InvalidTask, match="aware"):
        tasks.add.using(run_after=datetime(2030, 1, 1))


def test_validate_task__refuses_a_module_path_the_engine_cannot_store(db):
    with pytest.raises(InvalidTask, match="longer than 200 characters"):
        task()(named_too_long)


def test_validate_task__refuses_a_task_named_like_a_workflow_definition(db):
    with pytest.raises(InvalidTask, match="has the name of a workflow definition"):
        task()(clashes_with_a_workflow)


# Signals -------------------------------------------------------------------------------


def test_signals__enqueued_started_and_finished_are_sent(harness):
    seen: list[tuple[str, str]] = []
    finished: list[Any] = []

    def receiver(signal_name: str) -> Any:
        def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append((signal_name, task_result.status))
            if signal_name == "finished":
                finished.append(task_result)

        return receive

    receivers = [
        (task_enqueued, receiver("enqueued")),
        (task_started, receiver("started")),
        (task_finished, receiver("finished")),
    ]
    for signal, receive in receivers:
        signal.connect(receive)
    try:
        tasks.add.enqueue(1, 2)
        harness.drain()
    finally:
        for signal, receive in receivers:
            signal.disconnect(receive)

    assert seen == [("enqueued", READY), ("started", RUNNING), ("finished", SUCCESSFUL)]
    [result] = finished
    assert result.return_value == 3
    assert result.worker_ids == [worker_id()]
    assert result.started_at == result.finished_at == harness.now()


def finished_results(run: Any) -> list[Any]:
    """The results ``task_finished`` sent while ``run()`` ran."""
    sent: list[Any] = []

    def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
        sent.append(task_result)

    task_finished.connect(receive)
    try:
        run()
    finally:
        task_finished.disconnect(receive)
    return sent


def test_signals__finished_is_sent_failed_with_the_error_for_a_failed_task(harness):
    result = tasks.boom.enqueue("sent with the signal")

    [finished] = finished_results(harness.drain)

    assert finished.id == result.id
    assert finished.status == FAILED
    [error] = finished.errors
    assert error.exception_class_path == "tests.clusterapp.tasks.TaskBoomError"
    assert "sent with the signal" in error.traceback


def test_signals__finished_is_sent_failed_for_a_cancelled_task(harness):
    result = tasks.stamp.using(run_after=harness.now() + timedelta(hours=1)).enqueue("-")
    harness.drain()

    def cancel() -> None:
        workerflow.cancel(result.id, reason="not needed")
        harness.run_on_commit_callbacks()

    [finished] = finished_results(cancel)

    assert finished.id == result.id
    assert finished.status == FAILED
    assert finished.errors == []


# Defer, transactions, queues and priorities --------------------------------------------------


def test_run_after__the_task_waits_for_it_and_is_ready_meanwhile(harness, tmp_path):
    path = tmp_path / "stamp"
    when = harness.now() + timedelta(hours=1)
    result = tasks.stamp.using(run_after=when).enqueue(str(path))

    harness.advance(timedelta(minutes=59, seconds=59))
    result.refresh()
    assert result.status == READY
    assert lines(path) == []

    harness.advance(timedelta(seconds=1))
    result.refresh()
    assert result.status == SUCCESSFUL
    assert result.started_at == when


def test_enqueue__inside_a_rolled_back_transaction_enqueues_nothing(harness):
    enqueued = []

    def view() -> None:
        with transaction.atomic():
            enqueued.append(tasks.add.enqueue(1, 2))
            raise RuntimeError("the view fails after enqueueing")

    with pytest.raises(RuntimeError):
        view()

    [result] = enqueued
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result.id)
    assert harness.drain() == 0


def test_queue_limit__holds_across_task_functions_and_priorities_order_the_waiting(
    harness, tmp_path
):
    path = tmp_path / "order"
    holder = tasks.hold.enqueue(str(path), 0)
    low = tasks.record.using(priority=-10).enqueue(str(path), "low")
    default = tasks.record.enqueue(str(path), "default")
    high = tasks.record.using(priority=50).enqueue(str(path), "high")

    # One slot on the "serial" queue: the holder (another function) has it.
    assert WorkflowInstance.objects.get(key=holder.id).admitted_at is not None
    for waiting in (low, default, high):
        assert WorkflowInstance.objects.get(key=waiting.id).admitted_at is None
    harness.drain()

    assert [line.split()[0] for line in lines(path)] == ["hold", "high", "default", "low"]
    for result in (holder, low, default, high):
        result.refresh()
        assert result.status == SUCCESSFUL


def test_rate_limit__a_queue_s_rate_holds_across_task_functions(harness, tmp_path):
    path = tmp_path / "rated"
    results = [
        tasks.stamp.using(queue_name="rated").enqueue(str(path)),
        tasks.add.using(queue_name="rated").enqueue(1, 1),
        tasks.stamp.using(queue_name="rated").enqueue(str(path)),
    ]
    harness.drain()
    statuses = [task_backends["default"].get_result(r.id).status for r in results]
    assert statuses == [SUCCESSFUL, SUCCESSFUL, READY]  # two per second

    harness.advance(timedelta(seconds=1))
    assert task_backends["default"].get_result(results[2].id).status == SUCCESSFUL


# Tasks and workflows together ---------------------------------------------------------------


class EnqueuesATask(WorkflowDefinition):
    name = "test-enqueues-a-task"
    version = "1"

    def execute(self) -> str:
        return self.run("enqueue", lambda: tasks.add.enqueue(3, 4).id, atomic=True)


def test_workflow_step__enqueues_a_task_in_the_step_s_transaction(harness):
    instance = workerflow.start(EnqueuesATask, key="enqueuer")
    harness.drain()
    instance.refresh_from_db()

    result = tasks.add.get_result(instance.result)
    assert result.status == SUCCESSFUL
    assert result.return_value == 7


ENQUEUED_BY_A_FAILED_STEP: list[str] = []


class EnqueuesThenFails(WorkflowDefinition):
    name = "test-enqueues-a-task-then-fails"
    version = "1"

    def execute(self) -> None:
        def enqueue_then_fail() -> None:
            ENQUEUED_BY_A_FAILED_STEP.append(tasks.add.enqueue(3, 4).id)
            raise RuntimeError("the step fails after enqueueing")

        self.run("enqueue", enqueue_then_fail, atomic=True, max_attempts=1)


def test_workflow_step__a_step_that_fails_after_enqueueing_leaves_no_task(harness):
    ENQUEUED_BY_A_FAILED_STEP.clear()
    instance = workerflow.start(EnqueuesThenFails, key="failed-enqueuer")
    harness.drain()
    instance.refresh_from_db()

    assert instance.status == "failed"
    [task_id] = ENQUEUED_BY_A_FAILED_STEP
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(task_id)
    assert harness.drain() == 0  # nothing left to run either


def test_task__starts_a_workflow(harness):
    result = tasks.start_probe.enqueue("started-by-a-task")
    harness.drain()
    result.refresh()

    assert result.return_value == "started-by-a-task"
    assert WorkflowInstance.objects.get(key="started-by-a-task").status == "completed"


# One console ---------------------------------------------------------------------------------


def test_console__tasks_are_instances_of_their_own_kind_in_the_admin_and_the_command(
    harness, admin_client
):
    result = tasks.boom.enqueue("visible")
    harness.drain()

    listed = text(admin_client.get(changelist_url(definition_name="tests.clusterapp.tasks.boom")))
    out = io.StringIO()
    call_command("workerflow", "list", "--name", "tests.clusterapp.tasks.boom", stdout=out)

    assert result.id in listed
    assert result.id in out.getvalue()
    assert "failed" in out.getvalue()


def test_console__a_task_s_page_shows_its_arguments_attempt_and_traceback(harness, admin_client):
    result = tasks.boom.enqueue("shown on the page")
    harness.drain()
    instance = WorkflowInstance.objects.get(key=result.id)

    page = text(admin_client.get(change_url(instance)))

    assert "shown on the page" in page  # the arguments (the input) and the error
    assert "attempt-1" in page
    assert "raise TaskBoomError(message)" in page  # the attempt's traceback


def test_console__the_admin_s_cancel_makes_a_waiting_task_failed(harness, admin_client):
    result = tasks.stamp.using(run_after=harness.now() + timedelta(hours=1)).enqueue("-")
    harness.drain()
    instance = WorkflowInstance.objects.get(key=result.id)

    admin_client.post(
        changelist_url(),
        {"action": "cancel_selected", "_selected_action": [instance.pk], "apply": 1},
    )
    result.refresh()

    assert result.status == FAILED


def test_console__the_admin_s_retry_reruns_a_failed_task_to_success(
    harness, admin_client, tmp_path
):
    path = tmp_path / "flaky"
    result = tasks.flaky.using(queue_name="default").enqueue(str(path), 1)  # one attempt
    harness.drain()
    result.refresh()
    assert result.status == FAILED
    instance = WorkflowInstance.objects.get(key=result.id)

    admin_client.post(
        changelist_url(),
        {
            "action": "retry_selected",
            "_selected_action": [instance.pk],
            "reason": "the file is there now",
            "apply": 1,
        },
    )
    harness.drain()
    result.refresh()

    assert result.status == SUCCESSFUL
    assert result.return_value == 2
    assert len(lines(path)) == 2


def test_console__a_successful_task_s_page_shows_its_result(harness, admin_client):
    result = tasks.add.enqueue(1234, 4321)
    harness.drain()
    instance = WorkflowInstance.objects.get(key=result.id)

    page = text(admin_client.get(change_url(instance)))

    shown = re.search(r'id="wf-result">(.*?)</pre>', page, re.DOTALL)
    assert shown is not None
    assert shown.group(1).strip() == "5555"
