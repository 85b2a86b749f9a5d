"""What happens, in the same transaction, when an instance finishes.

:func:`instance_finished` is the one place the transitions that finish an instance
(``set_completed``, ``set_failed``, ``set_cancelled``) call, under the instance's row lock
and inside the transaction that changes its status. Everything that must commit or roll
back with the finish belongs here, each as its own small function.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connection

from django_workerflow.definition import registry
from django_workerflow.store import executor, lease, sql
from django_workerflow.values.states import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    StepState,
    StepType,
    WorkflowStatus,
)
from django_workerflow.workers import bells

if TYPE_CHECKING:
    from django_workerflow.models import WorkflowInstance

PARENT_CANCELLED = "parent cancelled"
PARENT_FINISHED = "parent finished"


def instance_finished(instance: WorkflowInstance, now: datetime, reason: str | None) -> None:
    """The (locked) ``instance`` has just become completed, failed or cancelled."""
    has_children, has_waiting = look_around(instance)
    if has_children:
        cancel_children(instance, now, reason)
    if has_waiting:
        wake_waiting_instances(instance, now)
    create_finish_delivery(instance, now, reason)
    admit_next(instance, now)


def look_around(instance: WorkflowInstance) -> tuple[bool, bool]:
    """Whether the instance has unfinished children, and instances waiting for it, in one
    statement; on PostgreSQL it also wakes the ``wait_result`` callers listening for it
    (the notification goes out when the finish commits)."""
    values: dict[str, Any] = {"instance": instance.pk}
    if connection.vendor == "postgresql":
        from django_workerflow.runtime.composition.results import channel

        name = "finish_followups_notify"
        values["channel"] = channel(instance.pk)
    else:
        name = "finish_followups"
    with connection.cursor() as cursor:
        executor.execute(cursor, name, sql.params(**values))
        row = cursor.fetchone()
    return bool(row[0]), bool(row[1])


def cancel_children(instance: WorkflowInstance, now: datetime, reason: str | None) -> None:
    """Cancel the unfinished, non-detached children (recursively: each one's own finish
    comes back here)."""
    from django_workerflow.models import WorkflowInstance

    children = list(
        WorkflowInstance.objects.select_for_update()
        .filter(parent_id=instance.pk, detached=False)
        .exclude(status__in=TERMINAL_STATUSES)
        .order_by("pk")
    )
    if not children:
        return
    if instance.status == WorkflowStatus.CANCELLED:
        inherited = reason or ""
        if inherited.startswith(PARENT_CANCELLED):
            child_reason = inherited
        else:
            child_reason = f"{PARENT_CANCELLED}: {inherited}" if inherited else PARENT_CANCELLED
    else:
        child_reason = PARENT_FINISHED
    for child in children:
        child.set_cancelled(now, child_reason)


def wake_waiting_instances(instance: WorkflowInstance, now: datetime) -> None:
    """Ring the instances whose child step waits for this one (a bell on commit)."""
    from django_workerflow.models import Step, WorkflowInstance

    waiting = Step.objects.filter(
        child_instance_id=instance.pk, type=StepType.CHILD, state=StepState.WAITING
    ).values_list("instance_id", flat=True)
    pks = sorted(set(waiting))
    if not pks:
        return
    for parent in WorkflowInstance.objects.select_for_update().filter(
        pk__in=pks, status__in=ACTIVE_STATUSES
    ):
        leased = lease.is_live(parent, now)
        if not leased:
            bells.arm(parent.pk, now)
        parent.request_wake(now, leased=leased)


def create_finish_delivery(instance: WorkflowInstance, now: datetime, reason: str | None) -> None:
    """A delivery row for the definition's ``on_finish``, if it defines one, carrying this
    finish's outcome (``reason``: a cancellation's)."""
    definition = registry.lookup(instance.definition_name, instance.definition_version)
    if definition is None or not callable(getattr(definition, "on_finish", None)):
        return
    from django_workerflow.runtime.composition import deliveries

    deliveries.create(instance, now, reason)


def admit_next(instance: WorkflowInstance, now: datetime) -> None:
    """Its slot of a concurrency-limited workflow is free: admit what waits for it."""
    from django_workerflow.runtime.flow.admission import (
        admit_after_finish,
    )  # admission reads models: import late

    admit_after_finish(instance, now)
