"""The import paths users, migrations and stored rows name keep resolving.

Queued django-q2 rows store a task's dotted path, users' ``Q_CLUSTER`` names the broker and
their ``TASKS`` the backend, migrations name the JSON field, and pytest loads the plugin by
its entry point: none of them may move with the package's layout."""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points

import pytest
from django.utils.module_loading import import_string

import django_workerflow
from django_workerflow.runtime.composition.deliveries import DELIVER_TASK
from django_workerflow.runtime.flow.schedules import SCHEDULE_TASK
from django_workerflow.workers.bells import TICK_TASK
from django_workerflow.workers.sweep_chain import BEAT_TASK
from django_workerflow.workers.sweeper_schedule import SWEEPER_FUNC

#: Every task path the engine stores in django-q2's rows (queued tasks and schedules).
STORED_TASKS = [
    "django_workerflow.tasks.tick",
    "django_workerflow.tasks.sweep",
    "django_workerflow.tasks.sweep_and_beat",
    "django_workerflow.tasks.deliver",
    "django_workerflow.tasks.run_schedules",
]

MODULES = [
    "django_workerflow",
    "django_workerflow.models",
    "django_workerflow.testing",
    "django_workerflow.signals",
    "django_workerflow.checks",
    "django_workerflow.tasks",
    "django_workerflow.broker",
    "django_workerflow.registry",
]

NAMES = [
    "django_workerflow.models.JSONTextField",
    "django_workerflow.broker.DueFirstOrmBroker",
    "django_workerflow.task_backend.WorkflowTaskBackend",
    "django_workerflow.signals.workflow_status_changed",
    "django_workerflow.testing.Harness",
]


@pytest.mark.parametrize("path", MODULES)
def test_stable_paths__the_documented_modules_import(path: str) -> None:
    import_module(path)


@pytest.mark.parametrize("path", [*NAMES, *STORED_TASKS])
def test_stable_paths__the_named_objects_resolve(path: str) -> None:
    import_string(path)


def test_stable_paths__the_stored_task_paths_are_the_ones_the_engine_queues() -> None:
    queued = {TICK_TASK, SWEEPER_FUNC, BEAT_TASK, DELIVER_TASK, SCHEDULE_TASK}
    assert queued == set(STORED_TASKS)
    assert all(callable(import_string(path)) for path in queued)


def test_stable_paths__every_public_name_resolves() -> None:
    for name in django_workerflow.__all__:
        assert getattr(django_workerflow, name) is not None, name


def test_stable_paths__the_pytest_plugin_entry_point_loads() -> None:
    (plugin,) = [e for e in entry_points(group="pytest11") if e.name == "workerflow"]
    assert plugin.value == "django_workerflow.pytest_plugin"
    assert plugin.load() is import_module("django_workerflow.pytest_plugin")
