"""Do the workers keep up? The probe behind ``manage.py workerflow health``.

Two signs of workers that no longer take work, both read from the database (any process can
run the probe; django-q2's own statistics live in each process's cache):

* bells due for longer than the allowed lag: active instances whose alarm passed long ago
  (an expired lease counts: its alarm is the lease expiry);
* no worker has reported: the sweeper, which runs as a task every
  ``WORKERFLOW_SWEEP_SECONDS`` (about a minute without the ORM broker), records a beat
  (:mod:`django_workerflow.workers.sweep_chain`); a wedged cluster runs no task, so its beat ages.

A probe that cannot reach the database says so instead, with an answer of its own: the
workers wait for the database and resume by themselves, so a supervisor must not restart
them for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import InterfaceError, OperationalError, connection
from django.db.models import Max, Min

from django_workerflow.models import WorkerHeartbeat, WorkflowInstance
from django_workerflow.values.clock import now as clock_now

#: The default of ``--max-lag``.
DEFAULT_MAX_LAG = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class Health:
    """What the probe found; ``ok`` is False when the workers do not keep up, or when the
    database could not be reached (``database_available`` False: nothing else is known)."""

    ok: bool
    message: str
    overdue: int
    oldest_alarm: datetime | None
    last_beat: datetime | None
    database_available: bool = True


def check(max_lag: timedelta = DEFAULT_MAX_LAG, now: datetime | None = None) -> Health:
    """Probe the workers: bells overdue by more than ``max_lag``, or no recent report; or
    say that the database is unavailable."""
    try:
        return _check(max_lag, now or clock_now())
    except (OperationalError, InterfaceError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        message = (
            f"DATABASE UNAVAILABLE: cannot reach database {connection.alias!r} "
            f"({type(error).__name__}: {reason}). The workers wait for it and resume on "
            "their own: do not restart them; bring the database back."
        )
        return Health(False, message, 0, None, None, database_available=False)


def _check(max_lag: timedelta, now: datetime) -> Health:
    limit = now - max_lag
    late = WorkflowInstance.objects.active().filter(alarm_at__lt=limit)
    found = late.aggregate(oldest=Min("alarm_at"))
    overdue = late.count() if found["oldest"] is not None else 0
    last_beat = WorkerHeartbeat.objects.aggregate(last=Max("beat_at"))["last"]
    allowed = _seconds(max_lag)
    problems = []
    if overdue:
        problems.append(
            f"{overdue} bell{'s' if overdue != 1 else ''} overdue, the oldest by "
            f"{_seconds(now - found['oldest'])} (more than {allowed})"
        )
    if last_beat is None:
        problems.append("no cluster has ever reported")
    elif last_beat < limit:
        problems.append(f"no cluster has reported for {_seconds(now - last_beat)}")
    if problems:
        message = (
            "UNHEALTHY: "
            + "; ".join(problems)
            + ". The workers are down, overloaded or wedged: restart the cluster."
        )
    else:
        assert last_beat is not None  # no report at all is a problem above
        message = (
            f"OK: no bell overdue by more than {allowed}; last report "
            f"{_seconds(now - last_beat)} ago."
        )
    return Health(not problems, message, overdue, found["oldest"], last_beat)


def _seconds(delta: timedelta) -> str:
    return f"{max(delta.total_seconds(), 0):.0f} s"
