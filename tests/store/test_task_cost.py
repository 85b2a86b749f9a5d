"""What one trivial task costs in SQL, enqueue to SUCCESSFUL, on a database that commits
(issue 21): no more than a workflow of one run step. The backend adds no statement of its
own: its first attempt reads nothing before it runs, and ``task_finished`` is announced
from what the attempt returned, without reading the history again.

The figures (statements per phase) are printed; docs/tasks.md explains them beside
django-tasks-db's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow import tasks as bell_tasks
from django_workerflow.models import WorkflowInstance
from django_workerflow.store import instance_ids
from tests.clusterapp import tasks
from tests.support.statements import TRANSACTION_CONTROL

try:  # Django 6
    from django.tasks.signals import task_finished
except ImportError:  # Django 5.2: the backport
    from django_tasks.signals import task_finished

pytestmark = pytest.mark.django_db(transaction=True)


def statements(run: Callable[[], Any]) -> tuple[list[str], Any]:
    """The statements ``run()`` executed (transaction control left out), and its value."""
    executed: list[str] = []

    def record(execute, sql, params, many, context):
        if not sql.lstrip().upper().startswith(TRANSACTION_CONTROL):
            executed.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        value = run()
    return executed, value


def test_task__costs_what_a_one_step_workflow_costs_and_its_signals_read_nothing(define):
    one_step = define(lambda self: self.run("attempt-1", lambda: {"value": None}))
    instance_ids.id_block.discard()
    # Warm up: the first start draws a block of ids, the first tick prepares the named
    # statements of this connection; the counted ones below do neither.
    bell_tasks.tick(workerflow.start(one_step).pk)
    finished: list[Any] = []

    def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
        finished.append(task_result)

    started, instance = statements(lambda: workerflow.start(one_step))
    ticked, _ = statements(lambda: bell_tasks.tick(instance.pk))
    task_finished.connect(receive)
    try:
        enqueued, result = statements(tasks.nothing.enqueue)
        pk = WorkflowInstance.objects.get(key=result.id).pk
        ran, _ = statements(lambda: bell_tasks.tick(pk))  # on-commit receivers included
    finally:
        task_finished.disconnect(receive)

    print(
        f"\n[{connection.vendor}] statements: enqueue {len(enqueued)} (start {len(started)}), "
        f"tick to SUCCESSFUL {len(ran)} (one-step workflow {len(ticked)})"
    )
    assert len(enqueued) == len(started)
    assert len(ran) == len(ticked)
    [announced] = finished  # the receiver above ran inside the counted tick
    assert announced.id == result.id
    assert announced.status == "SUCCESSFUL"
