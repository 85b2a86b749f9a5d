"""Visible trouble: definitions the workers lack, and events no step waits for.

The engine cannot see the workers' processes, so "no worker has it" is judged from this
process's registry: workers import the same ``workflows`` modules of the installed apps
(:meth:`~django_workerflow.apps.WorkerflowConfig.ready`), so a definition missing here is
missing there too, and one registered here from elsewhere may be missing there (check
``workerflow.W011``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING

from django.apps import apps

from django_workerflow import registry
from django_workerflow.models import Step
from django_workerflow.values.states import StepState, StepType

if TYPE_CHECKING:
    from django_workerflow.definition.workflow import WorkflowDefinition
    from django_workerflow.models import WorkflowInstance

__all__ = [
    "DEFINITIONS_HINT",
    "DJANGO_TASKS_HINT",
    "awaited_event_names",
    "missing_definition",
    "unimported_definitions",
    "unregistered_hint",
    "worker_imported_modules",
]

#: Where definitions must live for a worker to have them (log lines and check hints).
DEFINITIONS_HINT = (
    "workers register the definitions of the `workflows` module of each installed app (and "
    "what those modules import); define it there and deploy the workers"
)
#: Why a worker lacks a django.tasks task's definition (it loads those on demand), and the fix.
DJANGO_TASKS_HINT = (
    "it is a django.tasks task, and this worker process has no TASKS backend of "
    "django_workerflow to load it with: it was started before TASKS named "
    "django_workerflow.task_backend.WorkflowTaskBackend, or with other settings. Restart the "
    "workers with the settings that configure TASKS; the waiting tasks then run at once"
)
# What a Django task's instance is started with (task_backend.WorkflowTaskBackend.enqueue).
_DJANGO_TASK_INPUT = frozenset({"enqueued_at", "backend", "queue", "args", "kwargs"})
# How deep imports are followed from a `workflows` module, and packages never followed.
_IMPORT_DEPTH = 4
_NOT_FOLLOWED = ("django", "django_q", "django_workerflow")


def missing_definition(instance: WorkflowInstance) -> str | None:
    """``"no worker has workflow 'x' version 'y'"`` when the instance's pinned definition is
    not registered, or is registered from a module workers do not import (W011: this process
    may have imported it, a view say, where a worker would not), else None."""
    missing = (
        f"no worker has workflow '{instance.definition_name}' "
        f"version '{instance.definition_version}'"
    )
    definition = registry.lookup(instance.definition_name, instance.definition_version)
    if definition is None:
        return missing
    if unimported_definitions([definition]):
        where = definition.__module__
        return f"{missing}: it is registered from {where}, which workers do not import"
    return None


def unregistered_hint(instance: WorkflowInstance) -> str:
    """What to do about ``instance`` when a worker lacks its definition: restart the workers
    with TASKS for a task's, else define it where workers import it."""
    task_input = instance.input
    if isinstance(task_input, dict) and task_input.keys() >= _DJANGO_TASK_INPUT:
        return DJANGO_TASKS_HINT
    return DEFINITIONS_HINT


def awaited_event_names(instance: WorkflowInstance | int) -> list[str]:
    """The event names the instance's waiting wait steps wait for, oldest wait first."""
    pk = instance if isinstance(instance, int) else instance.pk
    names = (
        Step.objects.filter(instance_id=pk, type=StepType.WAIT, state=StepState.WAITING)
        .order_by("created_at", "id")
        .values_list("event_name", flat=True)
    )
    return list(dict.fromkeys(names))


def worker_imported_modules() -> set[str]:
    """The names of the modules a worker imports to register definitions: the ``workflows``
    module of every installed app and the modules their names come from, a few levels deep."""
    frontier = [
        module
        for config in apps.get_app_configs()
        if (module := sys.modules.get(f"{config.name}.workflows")) is not None
    ]
    seen = {module.__name__ for module in frontier}
    for _depth in range(_IMPORT_DEPTH):
        reached = []
        for module in frontier:
            for name in _names_used_by(module):
                if name not in seen and not name.startswith(_NOT_FOLLOWED) and name in sys.modules:
                    seen.add(name)
                    reached.append(sys.modules[name])
        frontier = reached
    return seen


def _names_used_by(module: ModuleType) -> Iterable[str]:
    for value in list(vars(module).values()):
        if isinstance(value, ModuleType):
            yield value.__name__
        elif isinstance(value, type) or callable(value):
            owner = getattr(value, "__module__", None)
            if isinstance(owner, str):
                yield owner


def unimported_definitions(
    definitions: Iterable[type[WorkflowDefinition]] | None = None,
) -> list[type[WorkflowDefinition]]:
    """The registered definitions (or ``definitions``) a worker may not have: registered in
    this process after its setup (a worker registers what every process does while it sets
    up: the ``workflows`` modules, an app's ``ready()`` and what they import), from a module
    no ``workflows`` module imports, and not registered on demand (a task's definition)."""
    imported = worker_imported_modules()
    candidates = registry.definitions() if definitions is None else definitions
    return [
        definition
        for definition in candidates
        if registry.registered_after_setup(definition)
        and not definition.registered_on_demand
        and definition.__module__ not in imported
    ]
