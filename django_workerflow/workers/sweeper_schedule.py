"""The sweeper's django-q2 schedule, created idempotently after migrations."""

from __future__ import annotations

from typing import Any

from django.apps import apps

SWEEPER_NAME = "workerflow sweeper"
SWEEPER_FUNC = "django_workerflow.tasks.sweep"


def ensure_sweeper_schedule(using: str = "default", **_: Any) -> None:
    """Create (or repair) the one repeating schedule that runs the sweeper every minute.

    ``Schedule.name`` is not unique in django-q2, so duplicates are removed here.
    """
    if not apps.is_installed("django_q"):
        return
    # Late: django_q may not be an installed app, and its Conf reads Q_CLUSTER on import.
    from django_q.models import Schedule

    schedules = Schedule.objects.using(using).filter(name=SWEEPER_NAME).order_by("pk")
    keep = schedules.first()
    if keep is None:
        Schedule.objects.using(using).create(
            name=SWEEPER_NAME,
            func=SWEEPER_FUNC,
            schedule_type=Schedule.MINUTES,
            minutes=1,
            repeats=-1,
        )
        return
    schedules.exclude(pk=keep.pk).delete()
    if (keep.func, keep.schedule_type, keep.minutes, keep.repeats) != (
        SWEEPER_FUNC,
        Schedule.MINUTES,
        1,
        -1,
    ):
        keep.func, keep.schedule_type, keep.minutes, keep.repeats = (
            SWEEPER_FUNC,
            Schedule.MINUTES,
            1,
            -1,
        )
        keep.save(using=using)
