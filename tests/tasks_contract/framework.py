"""The tasks framework's names, from ``django.tasks`` (Django 6) or the backport (5.2)."""

from __future__ import annotations

try:  # Django 6
    from django.tasks import TaskContext, TaskResultStatus, default_task_backend, task
    from django.tasks import task_backends as task_backends
    from django.tasks.base import Task
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch

    #: The logger Django's signal receivers write to.
    LOGGER = "django.tasks"
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskContext, TaskResultStatus, default_task_backend, task
    from django_tasks import task_backends as task_backends
    from django_tasks.base import Task
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch

    LOGGER = "django_tasks"

READY = TaskResultStatus.READY
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED

__all__ = [
    "FAILED",
    "LOGGER",
    "READY",
    "RUNNING",
    "SUCCESSFUL",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "default_task_backend",
    "task",
    "task_backends",
]
