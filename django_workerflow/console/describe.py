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
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Prefetch
from django.utils.text import Truncator

from django_workerflow.console.queue_words import is_queued, queued_words
from django_workerflow.console.time_words import format_duration, format_when
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
