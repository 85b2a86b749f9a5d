"""Tasks sent to a worker started before ``TASKS`` named the backend: the worker says to
restart it, and the restarted worker runs them at once (not at the minute's re-check)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from django_workerflow import registry
from django_workerflow.definition.drift import DJANGO_TASKS_HINT
from django_workerflow.models import WorkflowInstance
from django_workerflow.runtime.tick import recheck_unregistered
from django_workerflow.values.states import WakeCause
from tests.clusterapp import tasks

try:  # Django 6
    from django.tasks import TaskResultStatus
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus

TICK_LOGGER = "django_workerflow.runtime.tick"


@contextmanager
def worker_without_tasks() -> Iterator[None]:
    """This process as a worker started before TASKS named the backend: no loader defines a
    task's definition, and none is registered; leaving the block "restarts" it with TASKS."""
    saved, loaders = registry.snapshot(), list(registry._loaders)  # noqa: SLF001 - a worker without the backend's loader
    registry._loaders.clear()  # noqa: SLF001 - as above
    for definition in registry.definitions():
        if definition.registered_on_demand:
            registry.unregister(definition)
    try:
        yield
    finally:
        registry._loaders[:] = loaders  # noqa: SLF001 - as above
        registry.restore(saved)


def test_worker_without_tasks__logs_to_restart_it_and_the_restarted_one_runs_at_once(
    harness, caplog
):
    result = tasks.add.enqueue(2, 3)
    with worker_without_tasks(), caplog.at_level(logging.WARNING, logger=TICK_LOGGER):
        harness.drain()

    [warning] = [r.getMessage() for r in caplog.records if "not registered" in r.getMessage()]
    assert "Restart the workers with the settings that configure TASKS" in warning
    assert "deploy" not in warning
    instance = WorkflowInstance.objects.get(key=result.id)
    assert instance.alarm_cause == WakeCause.UNREGISTERED
    assert instance.alarm_at > harness.now()  # the re-check, a minute on
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY

    assert recheck_unregistered() == 1  # a restarted worker, as it spawns
    harness.drain()  # no time passes

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5


def test_recheck_unregistered__leaves_what_this_worker_lacks_too(harness):
    result = tasks.add.enqueue(2, 3)
    with worker_without_tasks():
        harness.drain()
        assert recheck_unregistered() == 0

    assert WorkflowInstance.objects.get(key=result.id).alarm_at > harness.now()


def test_unregistered_hint__a_workflow_s_instance_keeps_the_definitions_hint():
    from django_workerflow.definition.drift import DEFINITIONS_HINT, unregistered_hint

    assert unregistered_hint(WorkflowInstance(input={"order": 1})) == DEFINITIONS_HINT
    task_input = {"enqueued_at": "", "backend": "default", "queue": "default", "args": []}
    assert (
        unregistered_hint(WorkflowInstance(input={**task_input, "kwargs": {}})) == DJANGO_TASKS_HINT
    )
