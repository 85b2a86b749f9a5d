"""Every lock on instance rows, taken in one order.

This module is the one place that locks instance rows (``SELECT ... FOR UPDATE``), updates
several of them in one statement, or takes an admission gate; ``tests/store/test_locks.py``
fails on any other. A transaction that locks more than one row takes them in
this order, so no two operations on instances, whatever they are (a cancel, a child's tick
finishing it, a retry, an admission, the sweeper, a purge), deadlock each other on
PostgreSQL:

1. **Instances waiting for an instance before the instance itself.** A finishing
   instance's waiters (normally its parent, whose child step waits for it) are locked
   before its own row. Down a family a parent comes before its children, and any set of
   instance rows is locked in primary-key order (:func:`lock_instances`).
2. **Admission gates after every instance row** of the transaction, in (definition name,
   concurrency key) order (:func:`lock_gate`).
3. **Queued instance rows after their gate**, taken with ``SKIP LOCKED``
   (:func:`admit_queued`, :func:`queue_head`): an admission never waits for a queued row.
4. **Housekeeping never waits for live work.** The sweeper and purge take their rows with
   ``SKIP LOCKED`` in primary-key order, in short transactions of at most
   :data:`HOUSEKEEPING_BATCH` rows (:func:`take_unlocked`, :func:`take_purgeable`): a row
   they skip is being worked on, and the next pass sees it again.

5. **A definition's pause row before any instance row.** ``pause_definition`` inserts it
   in a transaction that locks no instance row; ``resume_definition`` deletes it and, in
   the same transaction, moves the timeout deadlines of the definition's unfinished
   instances by the pause's length, locking those rows in primary-key order (rule 1,
   :func:`delay_deadlines`). Nothing holds an instance row and then waits for a pause row
   (the tick's claim and the step fences only read it). Resuming then rings the held
   instances as housekeeping, rule 4 (:func:`take_unlocked`).

6. **A bell row last, or alone.** The broker claims bells with ``SKIP LOCKED`` and deletes
   them in transactions that lock nothing else; a tick that finishes its instance deletes
   its own bell in its settle, after the rows above
   (:mod:`django_workerflow.workers.handled_bell`). Nothing holds a bell row and then waits
   for another row.

A single instance row taken first in its transaction follows every rule: :func:`lock_instance`
here, or the tick's and the verbs' named statements (:mod:`.instance_rows`), which look the
row up and lock it in one statement. The one case the order cannot see ahead: an instance
that starts waiting (``wait_child``) for another just as that one finishes is locked after it.

On SQLite the database has one write lock and no row locks: ``FOR UPDATE`` and ``SKIP
LOCKED`` mean nothing there, and :func:`write_held` takes the write lock before a re-check
that must not go stale before the write that follows it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Q, QuerySet

from django_workerflow.models import AdmissionGate, DefinitionPause, Step, WorkflowInstance

#: The most rows a housekeeping transaction (a sweep's, a purge's link cut) locks at once.
HOUSEKEEPING_BATCH = 100


# Rule 1: instance rows, one, or several in primary-key order. ---------------------------


def lock_instance(pk: int) -> WorkflowInstance:
    """The instance ``pk`` under its row lock; ``WorkflowInstance.DoesNotExist`` if gone."""
    return WorkflowInstance.objects.select_for_update().get(pk=pk)


def lock_instances(rows: QuerySet[WorkflowInstance]) -> list[WorkflowInstance]:
    """The instances of ``rows``, each under its row lock, taken in primary-key order."""
    return list(rows.select_for_update().order_by("pk"))


def lock_instance_pks(rows: QuerySet[WorkflowInstance]) -> list[int]:
    """The primary keys of ``rows``, each row locked, taken in primary-key order."""
    return list(rows.select_for_update().order_by("pk").values_list("pk", flat=True))


def lock_pause(definition_name: str) -> DefinitionPause | None:
    """The pause row of ``definition_name`` under its lock (None: not paused): rule 5,
    before any instance row (on SQLite, the write lock, so the answer holds until the
    transaction writes)."""
    write_held()
    rows = DefinitionPause.objects.select_for_update()
    return rows.filter(definition_name=definition_name).first()


def delay_deadlines(rows: QuerySet[WorkflowInstance], by: timedelta) -> int:
    """Move the timeout deadline of each of ``rows`` that has one ``by`` later, in one
    statement that locks them in primary-key order; how many moved."""
    locked = rows.filter(deadline_at__isnull=False).select_for_update().order_by("pk")
    return WorkflowInstance.objects.filter(pk__in=locked.values("pk")).delay_deadlines(by)


# Rules 2 and 3: admission gates, then queued rows. ---------------------------------------


def lock_gate(definition_name: str, concurrency_key: str, now: datetime) -> None:
    """Lock the admission gate row, creating it on first use. An UPDATE takes the row lock
    on PostgreSQL and the write lock on SQLite before anything is counted."""
    gate = AdmissionGate.objects.filter(
        definition_name=definition_name, concurrency_key=concurrency_key
    )
    if gate.update(locked_at=now):
        return
    AdmissionGate.objects.bulk_create(
        [
            AdmissionGate(
                definition_name=definition_name, concurrency_key=concurrency_key, locked_at=now
            )
        ],
        ignore_conflicts=True,
    )
    gate.update(locked_at=now)


def admit_queued(queue: QuerySet[WorkflowInstance], count: int, now: datetime) -> list[int]:
    """Admit up to ``count`` instances of ``queue`` (in its order) that no one else holds;
    their pks. Call with the queue's gate locked."""
    pks = list(queue.select_for_update(skip_locked=True).values_list("pk", flat=True)[:count])
    if pks:
        WorkflowInstance.objects.admit(pks, now)
    return pks


def queue_head(queue: QuerySet[WorkflowInstance]) -> tuple[int, datetime | None] | None:
    """The pk and alarm of the first instance of ``queue`` that no one else holds, locked
    (None: none)."""
    head = queue.select_for_update(skip_locked=True).values_list("pk", "alarm_at").first()
    return None if head is None else (head[0], head[1])


# Rule 4: housekeeping. ------------------------------------------------------------------


def take_unlocked(
    rows: QuerySet[WorkflowInstance], pks: Iterable[int]
) -> list[tuple[int, datetime | None]]:
    """The (pk, alarm) of the ``rows`` among ``pks`` that no one else holds, locked, in
    primary-key order; the others are skipped, not waited for."""
    return list(
        rows.filter(pk__in=list(pks))
        .select_for_update(skip_locked=True)
        .order_by("pk")
        .values_list("pk", "alarm_at")
    )


def write_held() -> None:
    """Take the database's write lock now on SQLite (a write that changes nothing), so
    that what the transaction reads next cannot change before it writes; nothing on
    PostgreSQL, whose row locks do that."""
    if connection.vendor == "sqlite":
        # Matches no row (primary keys are positive), yet begins the write transaction.
        WorkflowInstance.objects.filter(pk__lt=0).update(wake_requested=False)


def take_purgeable(finished: QuerySet[WorkflowInstance], pks: Iterable[int]) -> list[int]:
    """Of ``pks``, the instances that are still in ``finished`` and that purge may delete
    in this transaction, locked: none that another transaction holds, and none that a row
    staying behind, held by another transaction, points at (a step awaiting it, a child, a
    fork); those wait for the next purge. The rows staying behind are unlinked from them.

    Nothing here waits for a row lock, and the status is read under the lock (on SQLite,
    under the write lock): an instance a retry, a fork, an event or a tick made unfinished
    meanwhile is not taken.
    """
    write_held()
    taken = set(
        finished.filter(pk__in=list(pks))
        .select_for_update(skip_locked=True)
        .values_list("pk", flat=True)
    )
    # An instance left out stays behind too, and may point at another: until none is.
    while busy := _pointed_at_by_held_rows(taken):
        taken -= busy
    if not taken:
        return []
    Step.objects.filter(child_instance_id__in=taken).exclude(instance_id__in=taken).update(
        child_instance=None
    )
    staying = WorkflowInstance.objects.exclude(pk__in=taken)
    staying.filter(parent_id__in=taken).update(parent=None)
    staying.filter(forked_from_id__in=taken).update(forked_from=None)
    return sorted(taken)


def _pointed_at_by_held_rows(taken: set[int]) -> set[int]:
    """The instances of ``taken`` that a row staying behind points at and another
    transaction holds; the other such rows are locked, in primary-key order."""
    steps = Step.objects.filter(child_instance_id__in=taken).exclude(instance_id__in=taken)
    step_links = dict(steps.values_list("pk", "child_instance_id"))
    held_steps = set(
        steps.select_for_update(skip_locked=True).order_by("pk").values_list("pk", flat=True)
    )
    busy = {child for step, child in step_links.items() if step not in held_steps}
    instances = WorkflowInstance.objects.filter(
        Q(parent_id__in=taken) | Q(forked_from_id__in=taken)
    ).exclude(pk__in=taken)
    links = list(instances.values_list("pk", "parent_id", "forked_from_id"))
    held = set(
        instances.select_for_update(skip_locked=True).order_by("pk").values_list("pk", flat=True)
    )
    for pk, parent_pk, forked_from_pk in links:
        if pk not in held:
            busy |= {parent_pk, forked_from_pk}
    return busy & taken
