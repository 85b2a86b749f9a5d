"""The benchmark's ``django.tasks`` function (its clusters and django-tasks-db's workers
import it by its module path)."""

from __future__ import annotations

try:  # Django 6
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task


@task()
def nothing() -> None:
    """A trivial task: what is measured is the backend, not the work."""
