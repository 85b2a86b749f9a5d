"""What an instance is waiting on, in words an on-call engineer reads at a glance.

"sleeping until 14:03:00 (in 58 min)", "waiting for event 'payment.received' until ...",
"retrying step 'charge' at ... ; attempt 2 of 3 failed: RuntimeError: card declined",
"failed in step 'charge': RuntimeError: card declined".

The words are computed from the instance row and the steps that need attention (unresolved
or failed), which the change list prefetches for a whole page in one query.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, tzinfo
from typing import Any

from django.db.models import Prefetch
from django.utils import timezone
from django.utils.text import Truncator

from django_workerflow.console.queue_words import is_queued, queued_words
from django_workerflow.definition import drift
from django_workerflow.exceptions import WorkflowTimeoutError
from django_workerflow.models import (
    Step,
    StepState,
    StepType,
    WorkflowEvent,
    WorkflowEventType,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.values.clock import now as clock_now

OPEN_STATES = frozenset({StepState.PENDING, StepState.RUNNING, StepState.WAITING})
FAILED_STATES = frozenset({StepState.FAILED, StepState.TIMED_OUT})
# Steps the "waiting on" words are made of; results and payloads are never needed for them.
ATTENTION_STATES = OPEN_STATES | FAILED_STATES
# Parallel branches can leave many steps open at once; name a few, count the rest.
MAX_NAMED_STEPS = 3


def attention_prefetches() -> list[Prefetch[str, Any, str]]:
    """Prefetches that give each instance ``attention_steps`` and ``cancel_events``."""
    return [
        Prefetch(
            "steps",
            queryset=Step.objects.filter(state__in=ATTENTION_STATES)
            .defer("result", "payload")
            .order_by("created_at", "id"),
            to_attr="attention_steps",
        ),
        Prefetch(
            "workflow_events",
            queryset=WorkflowEvent.objects.filter(type=WorkflowEventType.CANCELLED),
            to_attr="cancel_events",
        ),
    ]


def waiting_on(
    instance: WorkflowInstance,
    steps: Iterable[Step],
    now: datetime,
    *,
    cancel_reason: str | None = None,
    limit: int | None = 200,
) -> str:
    """Say what ``instance`` is waiting on (or why it ended) in one line.

    ``steps`` must hold at least its unresolved and failed steps; other steps are ignored.
    ``limit`` truncates long error messages (None: never).
    """
    status = instance.status
    steps = list(steps)
    missing = missing_definition(instance)
    if missing:
        return missing
    if status == WorkflowStatus.COMPLETED:
        return ""
    if status == WorkflowStatus.CANCELLED:
        return f"cancelled: {_clip(cancel_reason, limit)}" if cancel_reason else ""
    if status == WorkflowStatus.FAILED:
        return _failure(instance, steps, now, limit)
    # A step the current definition no longer reaches is not waited on (the instance page
    # lists it apart): it changed under the instance, which moved on without it.
    unreached = set(instance.unreached_step_ids or ())
    leaves = [step for step in _leaves(steps) if step.step_id not in unreached]
    parts = [_step_words(step, now, limit) for step in leaves]
    if len(parts) > MAX_NAMED_STEPS:
        parts = [*parts[:MAX_NAMED_STEPS], f"{len(parts) - MAX_NAMED_STEPS} more steps"]
    words = "; ".join(parts)
    if status == WorkflowStatus.PAUSED:
        return f"paused: {words}" if words else "paused"
    return words or _idle(instance, now)


def missing_definition(instance: WorkflowInstance) -> str:
    """ "no worker has workflow 'x' version 'y'" for an unfinished instance whose pinned
    definition no worker has (see :mod:`django_workerflow.definition.drift`), otherwise ""."""
    if instance.is_terminal:
        return ""
    return drift.missing_definition(instance) or ""


def cancel_reason_of(instance: WorkflowInstance) -> str | None:
    """The reason recorded with the instance's cancellation, from ``cancel_events``."""
    events = getattr(instance, "cancel_events", None)
    if events is None:
        event = instance.workflow_events.filter(type=WorkflowEventType.CANCELLED).last()
        events = [event] if event else []
    return events[-1].reason if events else None


def failed_step(steps: Iterable[Step]) -> Step | None:
    """The step whose failure ended the instance: the last failed or timed-out one."""
    failed = [step for step in steps if step.state in FAILED_STATES]
    return max(
        failed, key=lambda step: (step.resolved_at or step.created_at, step.pk), default=None
    )


def step_error(step: Step) -> str:
    """A failed or timed-out step's error, as "Name: message"."""
    if step.state == StepState.TIMED_OUT:
        return f"no event '{step.event_name}' arrived before the wait timed out"
    return step.error_message or step.error_name or "unknown error"


def timeout_words(instance: WorkflowInstance, now: datetime) -> str:
    """The instance's timeout and where its clock stands: "30 s; deadline 14:03:05 UTC (in
    12 s)", "30 s; paused: 12 s left", "30 s; the clock starts at its first tick", "30 s;
    timed out at ..."; "" for an instance without one."""
    if instance.timeout_seconds is None:
        return ""
    budget = format_duration(timedelta(seconds=instance.timeout_seconds))
    deadline = instance.deadline_at
    if instance.is_terminal:
        if instance.error_name == WorkflowTimeoutError.__name__ and deadline is not None:
            return f"{budget}; timed out at {format_when(deadline, now)}"
        return f"{budget}; its deadline was {format_when(deadline, now)}" if deadline else budget
    if instance.status == WorkflowStatus.PAUSED and instance.timeout_left_seconds is not None:
        left = format_duration(timedelta(seconds=instance.timeout_left_seconds))
        return f"{budget}; paused: {left} left"
    if deadline is None:
        return f"{budget}; the clock starts at its first tick"
    return f"{budget}; deadline {format_when(deadline, now)}"


def pretty_json(value: object) -> str:
    """Indented JSON for reading; keys keep their stored order."""
    return json.dumps(value, indent=2, ensure_ascii=False)


# Time ------------------------------------------------------------------------------------


def format_when(
    when: datetime | None,
    now: datetime,
    *,
    relative: bool = True,
    zone: bool = True,
    tz: tzinfo | None = None,
) -> str:
    """The console's one time format: the local time to the second, with the date when it
    is not ``now``'s day and the year when not its year, then the zone: "14:03:05 UTC",
    "Mar 19 14:03:05 CET", "2027-03-19 14:03:05 CET"; with ``relative``, "(in 5 min)" or
    "(2 h ago)" after it. ``zone=False`` where a column header says the zone; ``tz`` for a
    time in another zone than the current one (a schedule's own)."""
    if when is None:
        return ""
    local = timezone.localtime(when, tz)
    local_now = timezone.localtime(now, tz)
    if local.date() == local_now.date():
        text = local.strftime("%H:%M:%S")
    elif local.year == local_now.year:
        text = local.strftime("%b %d %H:%M:%S")
    else:
        text = local.strftime("%Y-%m-%d %H:%M:%S")
    if zone:
        text += f" {zone_name(local)}"
    if relative:
        text += f" ({relative_time(when, now)})"
    return text


def zone_name(when: datetime | None = None) -> str:
    """The zone's abbreviation at ``when`` ("UTC", "CET", "CEST"), or the current zone's
    name when there is no time to ask."""
    if when is not None:
        return timezone.localtime(when, when.tzinfo).tzname() or str(when.tzinfo)
    return timezone.localtime(clock_now()).tzname() or timezone.get_current_timezone_name()


def relative_time(when: datetime, now: datetime) -> str:
    """ "in 5 min", "2 h ago" or "now"."""
    delta = when - now
    if abs(delta) < timedelta(milliseconds=500):
        return "now"
    if delta > timedelta(0):
        return f"in {format_duration(delta)}"
    return f"{format_duration(-delta)} ago"


def format_duration(delta: timedelta) -> str:
    """A duration in the two largest units that matter: "250 ms", "1.5 s", "5 min 3 s",
    "2 h 5 min", "3 d 4 h"."""
    seconds = delta.total_seconds()
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 10:
        return f"{seconds:.1f}".rstrip("0").rstrip(".") + " s"
    if seconds < 60:
        return f"{int(seconds)} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def short_time(when: datetime | None, *, zone: bool = True) -> str:
    """:func:`format_when` at the clock's now, without the relative words."""
    return format_when(when, clock_now(), relative=False, zone=zone)


def clock_text(when: datetime | None) -> str:
    """The full form, for hovering and the command line: the date always, milliseconds when
    there are any, and the zone: "2026-12-01 14:03:05.123 UTC"."""
    if when is None:
        return ""
    local = timezone.localtime(when)
    text = local.strftime("%Y-%m-%d %H:%M:%S")
    if local.microsecond:
        text += f".{local.microsecond // 1000:03d}"
    return f"{text} {zone_name(local)}"


# Helpers ---------------------------------------------------------------------------------


def _leaves(steps: Sequence[Step]) -> list[Step]:
    """Open steps without an open child: a run step suspended by its child sleep is
    described by the sleep."""
    open_steps = [step for step in steps if step.state in OPEN_STATES]
    parents = {step.parent_id for step in open_steps}
    return [step for step in open_steps if step.pk not in parents]


def _step_words(step: Step, now: datetime, limit: int | None) -> str:
    name = f"'{step.step_id}'"
    if step.type == StepType.SLEEP:
        return f"sleeping until {format_when(step.wake_at, now)} in step {name}"
    if step.type == StepType.WAIT:
        words = f"waiting for event '{step.event_name}'"
        if step.timeout_at is not None:
            words += f" until {format_when(step.timeout_at, now)}"
        return f"{words} in step {name}"
    attempt = _attempt_words(step.attempt_count, step.max_attempts)
    if step.state == StepState.RUNNING:
        return f"running step {name} ({attempt})"
    if step.attempt_count and step.next_attempt_at is not None:
        failure = _clip(step.error_message or step.error_name, limit)
        return (
            f"retrying step {name} at {format_when(step.next_attempt_at, now)}; "
            f"{attempt} failed: {failure}"
        )
    return f"about to run step {name}"


def _attempt_words(count: int, max_attempts: int | None) -> str:
    return f"attempt {count} of {max_attempts}" if max_attempts else f"attempt {count}"


def _failure(
    instance: WorkflowInstance, steps: list[Step], now: datetime, limit: int | None
) -> str:
    step = failed_step(steps)
    if step is not None:
        return f"failed in step '{step.step_id}': {_clip(step_error(step), limit)}"
    error = instance.error_message or instance.error_name
    return f"failed: {_clip(error, limit)}" if error else "failed"


def _idle(instance: WorkflowInstance, now: datetime) -> str:
    """No step is open: the instance is between steps, starting, queued, or stuck."""
    if is_queued(instance):
        return queued_words(instance, now)
    leased = instance.lease_token and instance.lease_expires_at and instance.lease_expires_at > now
    if leased:
        return "executing on a worker"
    if instance.alarm_at is None:
        return "no alarm set"
    verb = "starting" if instance.status == WorkflowStatus.PENDING else "due"
    if instance.alarm_at <= now:
        return f"{verb}: waiting for a worker since {format_when(instance.alarm_at, now)}"
    return f"{verb} at {format_when(instance.alarm_at, now)}"


def _clip(text: str | None, limit: int | None) -> str:
    text = text or ""
    return Truncator(text).chars(limit) if limit else text
