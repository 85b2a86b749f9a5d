"""The engine's own django-q2 schedules that run a task every minute, created idempotently
after migrations (the sweeper, the replay verdicts' background pass)."""

from __future__ import annotations

from django.apps import apps


def ensure_every_minute(name: str, func: str, *, using: str = "default") -> None:
    """Create (or repair) the one repeating schedule ``name`` that runs ``func`` every minute.

    ``Schedule.name`` is not unique in django-q2, so duplicates are removed here, and a
    schedule of that name edited by hand is set back.
    """
    if not apps.is_installed("django_q"):
        return
    # Late: django_q may not be an installed app, and its Conf reads Q_CLUSTER on import.
    from django_q.models import Schedule

    wanted = (func, Schedule.MINUTES, 1, -1)
    schedules = Schedule.objects.using(using).filter(name=name).order_by("pk")
    keep = schedules.first()
    if keep is None:
        Schedule.objects.using(using).create(
            name=name, func=func, schedule_type=Schedule.MINUTES, minutes=1, repeats=-1
        )
        return
    schedules.exclude(pk=keep.pk).delete()
    if (keep.func, keep.schedule_type, keep.minutes, keep.repeats) != wanted:
        keep.func, keep.schedule_type, keep.minutes, keep.repeats = wanted
        keep.save(using=using)
