"""An instance finished: what commits with its finish, called by name where it happens.

The runtime calls :func:`instance_finished` right after the transition that finished the
instance (``set_completed`` or ``set_failed`` in the tick's settle, ``set_cancelled`` in
``cancel()``), in the same transaction and under the instance's row lock. It cancels the
unfinished children (each child's own finish comes back here), wakes the instances waiting
for it, creates the ``on_finish`` delivery and, last, admits what waits for the
concurrency slots the finish freed. Before the finishing instance's row is locked, the
caller takes :func:`lock_waiters`.

Every lock here is taken through :mod:`django_workerflow.store.locks`, whose docstring is
the lock order: the waiters before the instance, a parent before its children (in
primary-key order), and the gates whose slots the finishes freed last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from django_workerflow import registry
from django_workerflow.models import Step, WorkflowInstance
from django_workerflow.runtime.composition import deliveries, results
from django_workerflow.runtime.flow import admission
from django_workerflow.store import lease, locks
from django_workerflow.store.followups import read as read_followups
from django_workerflow.values.states import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    StepState,
    StepType,
    WakeCause,
    WorkflowStatus,
)
from django_workerflow.workers import bell_rows, bells, handled_bell

PARENT_CANCELLED = "parent cancelled"
PARENT_FINISHED = "parent finished"


@dataclass(frozen=True, slots=True)
class Followups:
    """What an instance's finish has to do besides the delivery: cancel unfinished
    children, wake instances waiting for it."""

    has_children: bool
    has_waiting: bool


@dataclass(slots=True)
class _Finishes:
    """The gates whose slots the finishes of one transaction freed."""

    freed_gates: set[tuple[str, str]] = field(default_factory=set)


def lock_waiters(instance_pk: int, *, bell: int | None = None) -> Followups:
    """Read what the finish of ``instance_pk`` has to do and lock the instances waiting for
    it; call before locking the instance itself (rule 1 of the lock order). ``bell``: the
    bell of the finishing tick, deleted with the read (see :func:`look_around`)."""
    followups = look_around(instance_pk, bell=bell)
    if followups.has_waiting:
        locks.lock_instance_pks(
            WorkflowInstance.objects.filter(
                pk__in=_waiting_pks(instance_pk), status__in=ACTIVE_STATUSES
            )
        )
    return followups


def instance_finished(
    instance: WorkflowInstance, now: datetime, reason: str | None, followups: Followups
) -> None:
    """The (locked) ``instance`` has just become completed, failed or cancelled."""
    finishes = _Finishes()
    _follow_up(instance, now, reason, followups, finishes)
    # Rule 2 of the lock order: gates last, in the order of their rows.
    for name, concurrency_key in sorted(finishes.freed_gates, key=lambda g: admission.gate_row(*g)):
        admission.admit_waiting(name, concurrency_key, now)


def look_around(instance_pk: int, *, bell: int | None = None) -> Followups:
    """Whether the instance has unfinished children, and instances waiting for it, in one
    statement; on PostgreSQL it also wakes the ``wait_result`` callers listening for it
    (the notification goes out when the transaction commits).

    ``bell``: the django-q2 bell whose tick finishes the instance, acknowledged (deleted) in
    this transaction (:mod:`django_workerflow.workers.handled_bell`): on PostgreSQL by the
    same statement, on SQLite by one more before it. The monitor then sends nothing once
    the transaction commits. A bell row is only ever locked last, or alone: the broker's
    claim and acknowledgement lock nothing else, and the claim skips locked rows."""
    queue_table = bell_rows.queue_table() if bell is not None else ""
    has_children, has_waiting = read_followups(
        instance_pk, channel=results.channel(instance_pk), bell=bell, queue_table=queue_table
    )
    if bell is not None:
        transaction.on_commit(lambda: handled_bell.acknowledged(bell))
    return Followups(has_children=has_children, has_waiting=has_waiting)


def _follow_up(
    instance: WorkflowInstance,
    now: datetime,
    reason: str | None,
    followups: Followups,
    finishes: _Finishes,
) -> None:
    if followups.has_children:
        _cancel_children(instance, now, reason, finishes)
    if followups.has_waiting:
        _wake_waiting_instances(instance, now)
    _create_finish_delivery(instance, now, reason)
    if admission.holds_slot(instance):
        finishes.freed_gates.add((instance.definition_name, instance.concurrency_key))
    else:
        # A queued instance held no slot, but may have carried its rate-limited queue's
        # alarm; this takes no gate and waits for no row (the lock order holds).
        admission.pass_on_the_alarm(instance, now)


def _cancel_children(
    instance: WorkflowInstance, now: datetime, reason: str | None, finishes: _Finishes
) -> None:
    """Cancel the unfinished, non-detached children, locked in primary-key order, and
    follow each one's finish up in turn (recursively: a family is cancelled top-down)."""
    children = locks.lock_instances(
        WorkflowInstance.objects.filter(parent_id=instance.pk, detached=False).exclude(
            status__in=TERMINAL_STATUSES
        )
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
        _follow_up(child, now, child_reason, look_around(child.pk), finishes)


def _waiting_pks(instance_pk: int) -> list[int]:
    """The instances whose child step waits for ``instance_pk``, in primary-key order."""
    waiting = Step.objects.filter(
        child_instance_id=instance_pk, type=StepType.CHILD, state=StepState.WAITING
    ).values_list("instance_id", flat=True)
    return sorted(set(waiting))


def _wake_waiting_instances(instance: WorkflowInstance, now: datetime) -> None:
    """Ring the instances whose child step waits for this one (a bell on commit). They are
    locked already (:func:`lock_waiters`; in a cascade, the parent is) unless one started
    waiting since, which is then locked here."""
    pks = _waiting_pks(instance.pk)
    if not pks:
        return
    for waiting in locks.lock_instances(
        WorkflowInstance.objects.filter(pk__in=pks, status__in=ACTIVE_STATUSES)
    ):
        leased = lease.is_live(waiting, now)
        rang = not leased and bells.ring(waiting.pk, now)
        waiting.request_wake(now, leased=leased, cause=WakeCause.CHILD, rang=rang)


def _create_finish_delivery(instance: WorkflowInstance, now: datetime, reason: str | None) -> None:
    """A delivery row for the definition's ``on_finish``, if it overrides the base's,
    carrying this finish's outcome (``reason``: a cancellation's)."""
    definition = registry.lookup(instance.definition_name, instance.definition_version)
    if definition is None or not definition.hears_finish():
        return
    deliveries.create(instance, now, reason)
