"""Do the workers keep up? The probe behind ``manage.py workerflow health``.

Two signs of workers that no longer take work, both read from the database (any process can
run the probe; django-q2's own statistics live in each process's cache):

* bells due for longer than the allowed lag: active instances whose alarm passed long ago
  (an expired lease counts: its alarm is the lease expiry);
* no worker has reported: the sweeper, which runs as a task every
  ``WORKERFLOW_SWEEP_SECONDS`` (about a minute without the ORM broker), records a beat
  (:mod:`django_workerflow.workers.sweep_chain`); a wedged cluster runs no task, so its beat ages.

And a sign of a misconfiguration that looks healthy: a stranded queue, one with tasks waiting
in django-q2's ORM queue although no cluster that reports serves it. A web process whose
``Q_CLUSTER["name"]`` differs from the workers' writes its bells there; the sweeper still
rings those instances from the workers' queue once overdue, so events take seconds instead
of a tenth of one and nothing else looks wrong.

A paused definition (:func:`django_workerflow.pause_definition`) is a warning, not a
problem: the probe lists it, with who paused it, when and why, and its instances (held on
purpose) are not counted overdue; the answer stays OK if nothing else is wrong.

A probe that cannot reach the database says so instead, with an answer of its own: the
workers wait for the database and resume by themselves, so a supervisor must not restart
them for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.apps import apps
from django.db import InterfaceError, OperationalError, connection
from django.db.models import Count, Max, Min

from django_workerflow.models import DefinitionPause, WorkerHeartbeat, WorkflowInstance
from django_workerflow.store import definition_pauses
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
    stranded: tuple[StrandedQueue, ...] = ()
    database_available: bool = True
    paused: tuple[DefinitionPause, ...] = ()


@dataclass(frozen=True, slots=True)
class StrandedQueue:
    """A django-q2 queue holding ``tasks`` that no cluster reporting now serves; the
    clusters report from ``served``."""

    queue: str
    tasks: int
    served: tuple[str, ...]

    @property
    def message(self) -> str:
        served = ", ".join(repr(queue) for queue in self.served)
        return (
            f"{self.tasks} task{'s' if self.tasks != 1 else ''} (bells) wait in queue "
            f"{self.queue!r}, which no cluster serves (the clusters serve {served}); give the "
            f"web process and the workers the same Q_CLUSTER['name'], or run a cluster for "
            f"{self.queue!r}"
        )


def stranded_queues(now: datetime, max_lag: timedelta = DEFAULT_MAX_LAG) -> list[StrandedQueue]:
    """The ORM queues with tasks that no cluster which reported within ``max_lag`` serves.

    Empty when no cluster reported at all (the probe says so on its own) or without
    django-q2's ORM broker (other brokers' queues cannot be read from here)."""
    if not apps.is_installed("django_q"):
        return []
    # Late: django_q may not be an installed app (checked above).
    from django_q.models import OrmQ

    served = sorted(
        WorkerHeartbeat.objects.filter(beat_at__gte=now - max_lag).values_list("queue", flat=True)
    )
    if not served:
        return []
    waiting = (
        OrmQ.objects.exclude(key__in=served)
        .values_list("key")
        .annotate(tasks=Count("id"))
        .order_by("key")
    )
    return [StrandedQueue(queue, tasks, tuple(served)) for queue, tasks in waiting]


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
    # A paused definition's instances are held on purpose, not late.
    late = WorkflowInstance.objects.active().unheld().filter(alarm_at__lt=limit)
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
    stranded = stranded_queues(now, max_lag)
    problems += [queue.message for queue in stranded]
    if problems:
        message = "UNHEALTHY: " + "; ".join(problems) + "."
        if len(problems) > len(stranded):
            message += " The workers are down, overloaded or wedged: restart the cluster."
    else:
        assert last_beat is not None  # no report at all is a problem above
        message = (
            f"OK: no bell overdue by more than {allowed}; last report "
            f"{_seconds(now - last_beat)} ago."
        )
    paused = tuple(definition_pauses.all_paused())
    message += "".join(f" WARNING: {_paused_line(pause, now)}." for pause in paused)
    return Health(
        not problems, message, overdue, found["oldest"], last_beat, tuple(stranded), paused=paused
    )


def _paused_line(pause: DefinitionPause, now: datetime) -> str:
    by = f" by {pause.paused_by}" if pause.paused_by else ""
    return (
        f"definition {pause.definition_name!r} paused{by} {_seconds(now - pause.paused_at)} ago "
        f"({pause.reason}); resume it with resume-definition"
    )


def _seconds(delta: timedelta) -> str:
    return f"{max(delta.total_seconds(), 0):.0f} s"
