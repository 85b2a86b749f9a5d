"""The at-least-once delivery of a finished instance to its definition's ``on_finish``."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import Q

from django_workerflow.models.fields import EngineDateTimeField, JSONTextField
from django_workerflow.models.instance import WorkflowInstance

# The attempts a delivery row keeps in its history (the newest ones); the count is exact.
KEPT_ATTEMPTS = 50


class FinishDeliveryQuerySet(models.QuerySet["FinishDelivery"]):
    def due(self, now: datetime) -> FinishDeliveryQuerySet:
        """Unacknowledged deliveries whose next attempt has come and whose lease (a worker
        calling the hook) is not live, earliest first."""
        return (
            self.filter(acknowledged_at__isnull=True, next_attempt_at__lte=now)
            .filter(Q(leased_until__isnull=True) | Q(leased_until__lte=now))
            .order_by("next_attempt_at", "id")
        )

    def pending(self) -> FinishDeliveryQuerySet:
        return self.filter(acknowledged_at__isnull=True)


class FinishDelivery(models.Model):
    """One row per finish of an instance whose definition defines ``on_finish``, created in
    the transaction that finished it; acknowledged once a call of the hook returned. An
    instance retried after it failed finishes again, and gets a new row (a new outcome id).

    The row keeps the outcome it was created for (``outcome_*``), so every redelivery
    reports that finish, even after a retry has set the instance running again. A
    completed instance's result is read from the instance (a completed instance never
    changes again), not copied.
    """

    instance = models.ForeignKey(
        WorkflowInstance, on_delete=models.CASCADE, related_name="finish_deliveries"
    )
    created_at = EngineDateTimeField()
    next_attempt_at = EngineDateTimeField(null=True, blank=True)
    # A worker calling the hook holds the delivery until then; after it, another may retry.
    leased_until = EngineDateTimeField(null=True, blank=True)
    attempt_count = models.PositiveIntegerField(default=0)
    last_error_name = models.CharField(max_length=200, blank=True, default="")
    last_error_message = models.TextField(blank=True, default="")
    # The newest attempts: [{"number", "started_at", "finished_at", "error"}].
    attempts = JSONTextField(null=True, blank=True)
    acknowledged_at = EngineDateTimeField(null=True, blank=True)
    # The finish delivered ("" on rows created before migration 0009: those report the
    # instance as it is when delivered).
    outcome_status = models.CharField(max_length=16, blank=True, default="", db_default="")
    outcome_error_name = models.CharField(max_length=200, blank=True, default="", db_default="")
    outcome_error_message = models.TextField(blank=True, default="", db_default="")
    outcome_reason = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL: no reason
    outcome_finished_at = EngineDateTimeField(null=True, blank=True)

    objects = FinishDeliveryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="workerflow_delivery_due",
                condition=Q(acknowledged_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        state = "acknowledged" if self.acknowledged_at else "pending"
        return f"on_finish delivery of instance #{self.instance_id} ({state})"
