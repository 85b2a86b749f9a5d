"""The lease: which worker may execute an instance, and the fence its writes check.

A tick claims the instance under its row lock: it takes the lease (a fresh token and an
expiry ``WORKERFLOW_LEASE_SECONDS`` ahead) unless a live lease is held, taking over a lease
that expired (its tick died). While the lease is held the instance's alarm is the lease
expiry, so an instance whose worker died comes due again by itself.

The fencing invariant (``docs/concepts.md`` states the same):

* **Starting an attempt or creating a step** needs the live lease, the status ``running``
  *and* no pause of the instance's definition, checked by the statement (or in the
  transaction) that writes (:data:`~django_workerflow.store.sql.LEASE_HELD_RUNNING`). A pause,
  a definition's pause or a cancel therefore takes effect at the next step boundary, and a
  worker whose lease was taken over starts nothing.
* **Recording the success of an attempt already started** is fenced by the step row (still
  ``running``, same attempt number), not by the lease. A worker that lost its lease still
  records the success of the attempt it started, unless the new owner already recorded that
  attempt as interrupted: both writes carry the same condition, so exactly one of the two
  lands. When the success rides with the next step's start (one statement), the start is
  fenced as above and only written if the success landed; a refused start (paused,
  cancelled, lease lost) still leaves the success recorded.
* **Recording a failed attempt** carries the same step-row condition, and also needs the
  lease (its retry schedule belongs to the owner); so does resolving a sleep or a wait.
* **Settling the tick** (status, alarm, release) needs the lease, checked on the locked
  instance row.

A renewal moves the lease expiry, and the alarm only while the instance is ``running``: a
paused or cancelled instance keeps the alarm its operator set. Renewals happen at claim, on
step writes (the hot path's every quarter lease) and from the renewal thread
(:mod:`django_workerflow.workers.lease_renewal`).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import connection

from django_workerflow.conf import settings
from django_workerflow.models.fields import engine_datetime
from django_workerflow.store import executor, sql
from django_workerflow.values.control_flow import ExecutionStopped
from django_workerflow.values.states import StopReason, WorkflowStatus

if TYPE_CHECKING:
    from django_workerflow.models import WorkflowInstance


def expiry(now: datetime) -> datetime:
    """When a lease taken or renewed at ``now`` runs out."""
    return now + timedelta(seconds=settings.LEASE_SECONDS)


def is_live(instance: WorkflowInstance, now: datetime) -> bool:
    """True while a worker holds an unexpired lease on the (locked) instance."""
    expires = instance.lease_expires_at
    return bool(instance.lease_token) and expires is not None and expires > now


def is_held(instance: WorkflowInstance, token: str) -> bool:
    """The python side of :data:`~django_workerflow.store.sql.LEASE_HELD`, on a locked row."""
    return instance.lease_token == token


def claim(instance: WorkflowInstance, token: str, now: datetime) -> bool:
    """Take the lease of the locked ``instance`` for ``token``; True if it was a take-over.

    The caller checked that no live lease is held. A pending instance starts running here.
    """
    taking_over = instance.lease_token is not None
    if instance.status == WorkflowStatus.PENDING:
        instance.start_running(token, expiry(now), now)
    else:
        instance.claim_lease(token, expiry(now))
    return taking_over


class Lease:
    """A tick's lease on one instance, as the step store's writes check and renew it."""

    def __init__(self, instance_pk: int, token: str, *, taken_at: float | None = None) -> None:
        """``taken_at``: when (``time.monotonic()``) the tick took the lease, if it just did:
        the claim set a fresh expiry, so the first renewal is due a quarter lease later (a
        first step write that renewed at once rewrote the instance row for nothing)."""
        self.instance_pk = instance_pk
        self.token = token
        # The hot path renews every quarter lease, not on every write.
        self._renew_due = 0.0 if taken_at is None else taken_at + settings.LEASE_SECONDS / 4

    def params(self, adapt: Any, now: datetime) -> dict[str, Any]:
        """The fence's statement parameters; ``renew`` says whether this write renews."""
        renew = time.monotonic() >= self._renew_due
        if renew:
            self._renew_due = time.monotonic() + settings.LEASE_SECONDS / 4
        return sql.params(
            instance=self.instance_pk,
            token=self.token,
            expires=adapt(expiry(now)),
            renew=renew,
        )

    def fence(self, cursor: Any, adapt: Any, now: datetime, *, require_running: bool) -> None:
        """Renew the lease (locking the instance row) or raise ExecutionStopped."""
        name = "renew_lease_running" if require_running else "renew_lease"
        executor.execute(cursor, name, self._renewal(adapt, now), prepare=False)
        if cursor.rowcount != 1:
            raise ExecutionStopped(self.stop_reason(cursor))

    def renew(self, cursor: Any, adapt: Any, now: datetime) -> bool:
        """Renew the lease; False once it is lost."""
        executor.execute(cursor, "renew_lease", self._renewal(adapt, now), prepare=False)
        renewed: bool = cursor.rowcount == 1
        return renewed

    def renew_alone(self, now: datetime) -> bool:
        """:meth:`renew` in a statement of its own (the renewal thread's); False once the
        lease is lost."""
        with connection.cursor() as cursor:
            return self.renew(cursor, partial(engine_datetime, connection=connection), now)

    def stop_reason(self, cursor: Any) -> StopReason:
        """Why a fenced write matched nothing: the lease is gone, the definition is paused,
        or the status changed."""
        executor.execute(cursor, "lease_token", {"instance": self.instance_pk}, prepare=False)
        row = cursor.fetchone()
        if row is None or row[0] != self.token:
            return StopReason.LEASE_LOST
        if row[1]:
            return StopReason.DEFINITION_PAUSED
        return StopReason.NOT_RUNNING

    def _renewal(self, adapt: Any, now: datetime) -> dict[str, Any]:
        return sql.params(instance=self.instance_pk, token=self.token, expires=adapt(expiry(now)))
