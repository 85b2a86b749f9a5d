"""The sweeper's django-q2 schedule, created idempotently after migrations."""

from __future__ import annotations

from typing import Any

from django_workerflow.workers.minute_schedules import ensure_every_minute

SWEEPER_NAME = "workerflow sweeper"
SWEEPER_FUNC = "django_workerflow.tasks.sweep"


def ensure_sweeper_schedule(using: str = "default", **_: Any) -> None:
    """post_migrate: create (or repair) the one schedule that runs the sweeper every minute."""
    ensure_every_minute(SWEEPER_NAME, SWEEPER_FUNC, using=using)
