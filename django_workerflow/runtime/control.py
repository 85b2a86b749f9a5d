"""Control of one instance: pause, resume, cancel, wake and retry_now.

Each locks the instance row with ``select_for_update`` in a short transaction, so concurrent
workers, events and operators serialise on it, and changes the instance through its
transition methods.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction

from django_workerflow.exceptions import WorkflowStateError
from django_workerflow.models import (
    ACTIVE_STATUSES,
    Step,
    StepState,
    StepType,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.runtime import finishing
from django_workerflow.store import instance_rows, lease, locks
from django_workerflow.values import storable
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.states import WakeCause
from django_workerflow.workers import bells

__all__ = ["cancel", "pause", "resume", "retry_now", "wake", "wake_locked"]

logger = logging.getLogger(__name__)


def pause(instance: WorkflowInstance | str) -> bool:
    """Pause a running instance; it stops at its next step boundary. False: nothing to do."""
    with transaction.atomic():
        locked = locks.lock_instance(instance_rows.pk_of(instance))
        if locked.status != WorkflowStatus.RUNNING:
            return False
        locked.set_paused(clock_now())
    instance_rows.copy_onto(instance, locked)
    return True


def resume(instance: WorkflowInstance | str) -> None:
    """Resume a paused instance at once; WorkflowStateError if it is not paused."""
    with transaction.atomic():
        locked = locks.lock_instance(instance_rows.pk_of(instance))
        if locked.status != WorkflowStatus.PAUSED:
            raise WorkflowStateError(
                f"Cannot resume workflow: expected status 'paused' but got '{locked.status}'. "
                f"Instance '{locked.key}' has status '{locked.status}' and was left as it is: "
                "only a paused instance resumes."
            )
        now = clock_now()
        locked.set_resumed(now)
        bells.arm(locked.pk, now)
    instance_rows.copy_onto(instance, locked)


def cancel(instance: WorkflowInstance | str, reason: str | None = None) -> bool:
    """Cancel an unfinished instance; no step starts after this. False: already finished."""
    reason = storable.check_reason(reason, verb="cancel")
    pk = instance_rows.pk_of(instance)
    with transaction.atomic():
        # The lock order (store/locks.py): whoever waits for this instance first.
        followups = finishing.lock_waiters(pk)
        locked = locks.lock_instance(pk)
        if locked.is_terminal:
            return False
        now = clock_now()
        locked.set_cancelled(now, reason)
        if not followups.has_children:
            # Asked again under the row lock: a child the instance's own tick started
            # between the first look and the lock is cancelled too.
            followups = finishing.look_around(pk)
        finishing.instance_finished(locked, now, reason, followups)
    instance_rows.copy_onto(instance, locked)
    return True


def wake(instance: WorkflowInstance | str) -> bool:
    """Ring the instance's alarm now (re-drive it). False if it is not pending or running."""
    with transaction.atomic():
        locked = locks.lock_instance(instance_rows.pk_of(instance))
        if locked.status not in ACTIVE_STATUSES:
            return False
        wake_locked(locked, clock_now())
    return True


def retry_now(instance: WorkflowInstance | str) -> list[str]:
    """Bring the pending retries of an active instance forward to now; return their step ids.

    Only a run step's backoff is shortened: a sleep or a wait keeps its time, which is part
    of the workflow. Call :func:`wake` afterwards so that a worker picks the retry up.
    """
    with transaction.atomic():
        locked = locks.lock_instance(instance_rows.pk_of(instance))
        if locked.status not in ACTIVE_STATUSES:
            return []
        now = clock_now()
        retrying = Step.objects.filter(
            instance_id=locked.pk,
            type=StepType.RUN,
            state=StepState.PENDING,
            next_attempt_at__gt=now,
        )
        step_ids = list(retrying.order_by("created_at", "id").values_list("step_id", flat=True))
        if step_ids:
            retrying.update(next_attempt_at=now)
            logger.info("retry brought forward key=%s steps=%s", locked.key, len(step_ids))
    return step_ids


def wake_locked(locked: WorkflowInstance, now: datetime, cause: WakeCause | None = None) -> None:
    """Ask for a tick now, for ``cause``; a tick in progress sees ``wake_requested`` and
    passes again."""
    leased = lease.is_live(locked, now)
    rang = not leased and bells.ring(locked.pk, now)
    locked.request_wake(now, leased=leased, cause=cause, rang=rang)
