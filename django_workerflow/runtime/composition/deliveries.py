"""At-least-once delivery of finished instances to their definition's ``on_finish``.

The delivery row is created in the transaction that finishes the instance
(:mod:`django_workerflow.runtime.finishing`), so a finish is never lost. A worker claims a due
delivery under a lease (one short transaction), calls the hook outside any transaction of ours, then
records the acknowledgement, or the error and the next attempt: 1 s, 2 s, 4 s ... capped at one
hour, without limit. A worker that dies mid-hook leaves the lease to expire; the sweeper then rings
the delivery again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from django_workerflow import registry
from django_workerflow.conf import settings
from django_workerflow.engine.failures import error_message
from django_workerflow.models import FinishDelivery, WorkflowInstance
from django_workerflow.models.delivery import KEPT_ATTEMPTS
from django_workerflow.store.outcomes import cancel_reasons
from django_workerflow.values import storable
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.outcome import Outcome
from django_workerflow.values.sealing import open_value
from django_workerflow.values.states import WorkflowStatus
from django_workerflow.workers import bells

logger = logging.getLogger(__name__)

DELIVER_TASK = "django_workerflow.tasks.deliver"
FIRST_RETRY = timedelta(seconds=1)
RETRY_CAP = timedelta(hours=1)


def redelivery_delay(failed_attempts: int) -> timedelta:
    """The wait after the ``failed_attempts``-th failed call: 1 s doubling, capped at 1 h."""
    if failed_attempts >= 13:  # 2**12 s is past the cap already
        return RETRY_CAP
    return min(FIRST_RETRY * 2.0 ** (failed_attempts - 1), RETRY_CAP)


def create(instance: WorkflowInstance, now: datetime, reason: str | None = None) -> FinishDelivery:
    """Create the delivery of a finishing instance (inside its finishing transaction), with
    the outcome it reports on every attempt: the instance's status, error and finish time
    now, and ``reason`` (a cancellation's)."""
    delivery = FinishDelivery.objects.create(
        instance=instance,
        created_at=now,
        next_attempt_at=now,
        outcome_status=instance.status,
        outcome_error_name=instance.error_name,
        outcome_error_message=instance.error_message,
        outcome_reason=reason if instance.status == WorkflowStatus.CANCELLED else None,
        outcome_finished_at=instance.finished_at,
    )
    _ring(delivery.pk, now)
    return delivery


@dataclass(frozen=True, slots=True)
class _Claim:
    delivery: FinishDelivery
    attempt: int
    instance: WorkflowInstance
    started_at: datetime

    @property
    def delivery_pk(self) -> int:
        return self.delivery.pk


def deliver(delivery_pk: int) -> bool | None:
    """Claim the delivery if it is due and call the hook once: True if it returned (the
    delivery is acknowledged), False if it raised (retried later), None if not due."""
    claim = _claim(delivery_pk)
    if claim is None:
        return None
    error = _call_hook(claim)
    _record(claim, error)
    return error is None


def deliver_due(*, limit: int = 100) -> int:
    """Deliver every due delivery (the harness and tests call this); return the calls made."""
    pks = list(FinishDelivery.objects.due(clock_now()).values_list("pk", flat=True)[:limit])
    return sum(1 for pk in pks if deliver(pk) is not None)


def ring_due(*, limit: int = 1000) -> int:
    """Queue a delivery task for every due delivery (the sweeper: lost bells, dead workers)."""
    now = clock_now()
    pks = list(sweep_backlog(now).values_list("pk", flat=True)[:limit])
    with transaction.atomic():
        for pk in pks:
            _ring(pk, now)
    return len(pks)


def sweep_backlog(now: datetime) -> QuerySet[FinishDelivery]:
    """What :func:`ring_due` rings at ``now`` (the sweeper's probe asks if any exists)."""
    return FinishDelivery.objects.due(now)


def deliver_now(delivery: FinishDelivery) -> bool:
    """Make an unacknowledged delivery due at once and ring it (the admin's button).
    False if it was already acknowledged."""
    now = clock_now()
    with transaction.atomic():
        updated = FinishDelivery.objects.filter(
            pk=delivery.pk, acknowledged_at__isnull=True
        ).update(next_attempt_at=now, leased_until=None)
        if updated:
            _ring(delivery.pk, now)
    return bool(updated)


def _ring(delivery_pk: int, when: datetime) -> None:
    bells.ring_task(
        DELIVER_TASK, delivery_pk, when=when, name=f"workerflow on_finish {delivery_pk}"
    )


def _claim(delivery_pk: int) -> _Claim | None:
    with transaction.atomic():
        now = clock_now()
        delivery = (
            FinishDelivery.objects.select_for_update()
            .due(now)
            .filter(pk=delivery_pk)
            .select_related("instance")
            .first()
        )
        if delivery is None:
            return None
        delivery.attempt_count += 1
        delivery.leased_until = now + timedelta(seconds=settings.LEASE_SECONDS)
        attempts = list(delivery.attempts or [])
        attempts.append({"number": delivery.attempt_count, "started_at": now.isoformat()})
        delivery.attempts = attempts[-KEPT_ATTEMPTS:]
        delivery.save(update_fields=["attempt_count", "leased_until", "attempts"])
        return _Claim(delivery, delivery.attempt_count, delivery.instance, now)


def _call_hook(claim: _Claim) -> BaseException | None:
    """Call ``on_finish`` outside any transaction of ours; return what it raised."""
    instance = claim.instance
    definition_class = registry.lookup(instance.definition_name, instance.definition_version)
    try:
        if definition_class is None:
            raise LookupError(
                f"Definition '{instance.definition_name}' version "
                f"'{instance.definition_version}' is not registered in this process."
            )
        definition = definition_class(key=instance.key, input=open_value(instance.input))
        definition.on_finish(_outcome(claim))
    except Exception as exc:
        logger.warning(
            "on_finish failed key=%s attempt=%s error=%s",
            instance.key,
            claim.attempt,
            type(exc).__name__,
        )
        return exc
    logger.info("on_finish delivered key=%s attempt=%s", instance.key, claim.attempt)
    return None


def _outcome(claim: _Claim) -> Outcome:
    """The finish the delivery was created for (the instance may have been retried since:
    it is not read from the instance, apart from a completed instance's result)."""
    delivery, instance = claim.delivery, claim.instance
    if delivery.outcome_status:
        completed = delivery.outcome_status == WorkflowStatus.COMPLETED
        return Outcome(
            id=delivery.pk,
            key=instance.key,
            status=delivery.outcome_status,
            result=open_value(instance.result) if completed else None,
            error_name=delivery.outcome_error_name,
            error_message=delivery.outcome_error_message,
            reason=delivery.outcome_reason,
            finished_at=delivery.outcome_finished_at,
        )
    # A row created before the outcome was kept on it: the instance as it is.
    reason = cancel_reasons([instance.pk]).get(instance.pk)
    return Outcome(
        id=claim.delivery_pk,
        key=instance.key,
        status=instance.status,
        result=open_value(instance.result),
        error_name=instance.error_name,
        error_message=instance.error_message,
        reason=reason,
        finished_at=instance.finished_at,
    )


def _record(claim: _Claim, error: BaseException | None) -> None:
    with transaction.atomic():
        delivery = FinishDelivery.objects.select_for_update().get(pk=claim.delivery_pk)
        now = clock_now()
        attempts: list[dict[str, Any]] = list(delivery.attempts or [])
        entry = next((a for a in attempts if a.get("number") == claim.attempt), None)
        if entry is not None:
            entry["finished_at"] = now.isoformat()
            entry["error"] = error_message(error) if error is not None else None
        delivery.attempts = attempts
        delivery.leased_until = None
        if error is None:
            delivery.acknowledged_at = delivery.acknowledged_at or now
            delivery.next_attempt_at = None
        elif delivery.acknowledged_at is None:
            delivery.last_error_name = storable.error_name(error)
            delivery.last_error_message = error_message(error)
            delivery.next_attempt_at = now + redelivery_delay(claim.attempt)
            _ring(delivery.pk, delivery.next_attempt_at)
        delivery.save()
