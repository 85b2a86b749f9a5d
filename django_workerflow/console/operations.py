"""Operator actions on a set of instances, each through the runtime, reported per instance.

Every function takes instances and returns a :class:`Report`: what was done to which
instance and why the others were skipped, so the admin can say "3 workflows paused; 1
skipped: already completed" and log each change with its reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django_workerflow.console.time_words import format_when
from django_workerflow.exceptions import WorkflowInputError, WorkflowStateError
from django_workerflow.models import Step, StepState, StepType, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime import control, events
from django_workerflow.values.clock import now as clock_now


@dataclass(slots=True)
class InstanceReport:
    """What an action did to one instance. ``label`` groups instances in the summary;
    ``detail`` says it for this instance alone (and is what the admin history records);
    ``warning``: done, but not as the operator may expect (the detail says why)."""

    instance: WorkflowInstance
    done: bool
    label: str
    detail: str
    warning: bool = False


@dataclass(slots=True)
class Report:
    entries: list[InstanceReport] = field(default_factory=list)

    def add(
        self,
        instance: WorkflowInstance,
        done: bool,
        label: str,
        detail: str = "",
        *,
        warning: bool = False,
    ) -> None:
        if not detail:
            detail = label if done else f"Skipped '{instance.key}': {label}."
        self.entries.append(InstanceReport(instance, done, label, detail, warning))

    @property
    def warnings(self) -> list[InstanceReport]:
        return [entry for entry in self.entries if entry.warning]

    @property
    def done(self) -> list[InstanceReport]:
        return [entry for entry in self.entries if entry.done]

    @property
    def skipped(self) -> list[InstanceReport]:
        return [entry for entry in self.entries if not entry.done]

    def summary(self) -> str:
        """ "3 workflows paused; 1 skipped: already completed", or the one instance's detail."""
        if len(self.entries) == 1:
            return self.entries[0].detail
        if not self.entries:
            return "No workflow selected."
        parts = [
            f"{count} {_workflows(count)} {label}"
            for label, count in Counter(o.label for o in self.done).items()
        ]
        parts += [
            f"{count} skipped: {label}"
            for label, count in Counter(o.label for o in self.skipped).items()
        ]
        return "; ".join(parts)


def pause(instances: Iterable[WorkflowInstance]) -> Report:
    """Pause each running instance at its next step boundary."""
    report = Report()
    for instance in instances:
        if control.pause(instance):
            report.add(instance, True, "paused", f"Paused '{instance.key}'.")
        else:
            report.add(instance, False, _why_not(instance, WorkflowStatus.RUNNING))
    return report


def resume(instances: Iterable[WorkflowInstance]) -> Report:
    """Resume each paused instance at once."""
    report = Report()
    for instance in instances:
        try:
            control.resume(instance)
        except WorkflowStateError:
            report.add(instance, False, _why_not(instance, WorkflowStatus.PAUSED))
        else:
            report.add(instance, True, "resumed", f"Resumed '{instance.key}'.")
    return report


def cancel(instances: Iterable[WorkflowInstance], reason: str | None) -> Report:
    """Cancel each unfinished instance, recording ``reason`` with the cancellation."""
    report = Report()
    because = f" Reason: {reason}" if reason else " No reason given."
    for instance in instances:
        if control.cancel(instance, reason=reason):
            report.add(instance, True, "cancelled", f"Cancelled '{instance.key}'.{because}")
        else:
            report.add(instance, False, _why_not(instance, "unfinished"))
    return report


def send_event(
    instances: Iterable[WorkflowInstance],
    event_name: str,
    payload: Any,
    idempotency_key: str | None = None,
) -> Report:
    """Send the event to each instance; a waiting step claims it, or it is queued. With
    ``idempotency_key``, an instance that already received an event with it gets nothing
    more (the report describes the first one)."""
    report = Report()
    sent = f"event '{event_name}'"
    for instance in instances:
        try:
            event = events.send_event(
                instance, event_name, payload, idempotency_key=idempotency_key
            )
        except WorkflowInputError as exc:
            report.add(instance, False, str(exc))
            continue
        if event is None:
            report.add(instance, False, _why_not(instance, "unfinished"))
        elif event.claimed_by_id is not None:
            step_id = Step.objects.values_list("step_id", flat=True).get(pk=event.claimed_by_id)
            detail = f"Sent {sent} to '{instance.key}': step '{step_id}' claimed it."
            report.add(instance, True, f"received {sent} in a waiting step", detail)
        else:
            instance.refresh_from_db(fields=["status"])
            why = "the instance is paused" if instance.status == WorkflowStatus.PAUSED else None
            why = why or _not_awaited(event.waiting_for)
            detail = f"Sent {sent} to '{instance.key}': queued, {why}."
            report.add(instance, True, f"queued {sent}", detail)
    return report


def wake(instances: Iterable[WorkflowInstance]) -> Report:
    """Ring each active instance's alarm now: a pending retry runs at once, a stuck instance
    is driven again. A sleep or a wait is never skipped, and the report says so."""
    report = Report()
    for instance in instances:
        now = clock_now()
        sleeping, waiting = _waiting_steps(instance, now)
        retried = control.retry_now(instance)
        if not control.wake(instance):
            report.add(instance, False, _why_not(instance, "pending or running"))
            continue
        key = f"'{instance.key}'"
        if retried:
            steps = ", ".join(f"'{step_id}'" for step_id in retried)
            detail = f"Woke {key}: the next attempt of step {steps} runs now."
            report.add(instance, True, "woken: retry runs now", detail)
        elif sleeping:
            step = sleeping[0]
            detail = (
                f"Woke {key}, but it keeps sleeping in step '{step.step_id}' until "
                f"{format_when(step.wake_at, now)}: a wake never skips a sleep."
            )
            label = "woken but still sleeping (a wake never skips a sleep)"
            report.add(instance, True, label, detail)
        elif waiting:
            step = waiting[0]
            detail = (
                f"Woke {key}, but it keeps waiting for event '{step.event_name}' in step "
                f"'{step.step_id}': send the event to move it on."
            )
            report.add(instance, True, "woken but still waiting for an event", detail)
        else:
            detail = f"Woke {key}: a worker will execute it now."
            report.add(instance, True, "woken", detail)
    return report


def _waiting_steps(instance: WorkflowInstance, now: datetime) -> tuple[list[Step], list[Step]]:
    """The instance's sleeps that have not come due and waits that have not timed out."""
    steps = (
        Step.objects.filter(instance_id=instance.pk, state=StepState.WAITING)
        .order_by("created_at", "id")
        .only("step_id", "type", "wake_at", "event_name", "timeout_at")
    )
    sleeping, waiting = [], []
    for step in steps:
        if step.type == StepType.SLEEP and step.wake_at and step.wake_at > now:
            sleeping.append(step)
        elif step.type == StepType.WAIT and (step.timeout_at is None or step.timeout_at > now):
            waiting.append(step)
    return sleeping, waiting


def _not_awaited(waiting_for: list[str] | None) -> str:
    """Why a queued event was not claimed, naming the events the instance waits for."""
    if not waiting_for:
        return "no step waits for it yet"
    names = ", ".join(f"'{name}'" for name in waiting_for)
    return f"no step waits for it yet (the instance waits for {names})"


def _why_not(instance: WorkflowInstance, expected: str) -> str:
    """Why an action skipped ``instance``: its status now, read back from the database.

    ``expected`` is the status the action needed, or words for several ("unfinished")."""
    instance.refresh_from_db(fields=["status"])
    status = instance.status
    if instance.is_terminal:
        return f"already {status}"
    if status == WorkflowStatus.PENDING and expected == WorkflowStatus.RUNNING:
        return "not started yet"
    return f"{status}, not {expected}"


def _workflows(count: int) -> str:
    return "workflow" if count == 1 else "workflows"
