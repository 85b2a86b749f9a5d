"""The engine's tables. Only :mod:`django_workerflow.runtime` and the step store write them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import Q

from . import jsonvalue
from .states import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    StepEventType,
    StepState,
    StepType,
    WorkflowEventType,
    WorkflowStatus,
)

__all__ = [
    "ACTIVE_STATUSES",
    "TERMINAL_STATUSES",
    "InboundEvent",
    "Step",
    "StepEvent",
    "StepEventType",
    "StepState",
    "StepType",
    "WorkflowEvent",
    "WorkflowEventType",
    "WorkflowInstance",
    "WorkflowStatus",
]


class JSONTextField(models.TextField):
    """JSON kept as text, so values read back exactly as written (``jsonb`` reorders keys)."""

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        return jsonvalue.loads(value)

    def get_prep_value(self, value: Any) -> str | None:
        if value is None:
            return None
        return jsonvalue.dumps(value, what=f"Field {self.name!r}")

    def value_to_string(self, obj: models.Model) -> str:
        return self.get_prep_value(self.value_from_object(obj)) or ""


class WorkflowInstanceQuerySet(models.QuerySet):
    def active(self) -> WorkflowInstanceQuerySet:
        """Instances the engine may still tick: pending or running."""
        return self.filter(status__in=ACTIVE_STATUSES)

    def due(self, now: datetime) -> WorkflowInstanceQuerySet:
        """Active instances whose alarm has come, earliest first."""
        return self.active().filter(alarm_at__lte=now).order_by("alarm_at", "id")

    def finished(self) -> WorkflowInstanceQuerySet:
        return self.filter(status__in=TERMINAL_STATUSES)


class WorkflowInstance(models.Model):
    """One run of a definition, identified by its ``key``."""

    key = models.CharField(max_length=255, unique=True)
    definition_name = models.CharField(max_length=200)
    definition_version = models.CharField(max_length=100)
    input = JSONTextField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=WorkflowStatus.choices, default=WorkflowStatus.PENDING
    )
    result = JSONTextField(null=True, blank=True)
    error_name = models.CharField(max_length=200, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    alarm_at = models.DateTimeField(null=True, blank=True)
    # Ownership: the worker holding the lease is the only one executing the instance.
    lease_token = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 - NULL: no lease
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Recorded steps that the last whole replay did not reach: the definition changed.
    unreached_step_ids = JSONTextField(null=True, blank=True)
    # When the last bell queued for the alarm rings (see alarms.py); None: none queued.
    bell_at = models.DateTimeField(null=True, blank=True)
    # Set when something changed under a running tick: it takes one more pass.
    wake_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = WorkflowInstanceQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # Serves due() on both databases: SQLite without statistics otherwise prefers
            # the (status, finished_at) index, 40x slower at 100,000 sleeping instances.
            models.Index(
                fields=["status", "alarm_at"],
                name="workerflow_alarm_due",
                condition=Q(alarm_at__isnull=False),
            ),
            models.Index(fields=["definition_name", "status"], name="workerflow_name_status"),
            models.Index(fields=["status", "finished_at"], name="workerflow_status_finished"),
        ]
        permissions = [
            ("pause_workflowinstance", "Can pause workflow instances"),
            ("resume_workflowinstance", "Can resume workflow instances"),
            ("cancel_workflowinstance", "Can cancel workflow instances"),
            ("send_event_workflowinstance", "Can send events to workflow instances"),
        ]

    def __str__(self) -> str:
        return f"{self.definition_name}:{self.key}"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def pause(self) -> bool:
        """Pause a running instance at its next step boundary; False if nothing changed."""
        from . import runtime  # runtime imports models: import at call time

        return runtime.pause(self)

    def resume(self) -> None:
        """Resume a paused instance; WorkflowStateError if it is not paused."""
        from . import runtime

        runtime.resume(self)

    def cancel(self, reason: str | None = None) -> bool:
        """Cancel a non-terminal instance; False if it had already finished."""
        from . import runtime

        return runtime.cancel(self, reason=reason)

    def send_event(self, event_name: str, payload: Any = None) -> InboundEvent | None:
        from . import runtime

        return runtime.send_event(self, event_name, payload)


class Step(models.Model):
    """A durable step of an instance: a run, a sleep or a wait."""

    # No index of its own: the unique (instance, step_id) constraint's index leads with it.
    instance = models.ForeignKey(
        WorkflowInstance, on_delete=models.CASCADE, related_name="steps", db_index=False
    )
    step_id = models.CharField(max_length=200)
    type = models.CharField(max_length=8, choices=StepType.choices)
    state = models.CharField(max_length=16, choices=StepState.choices)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    attempt_count = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    result = JSONTextField(null=True, blank=True)
    error_name = models.CharField(max_length=200, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    wake_at = models.DateTimeField(null=True, blank=True)
    event_name = models.CharField(max_length=200, blank=True, default="")
    timeout_at = models.DateTimeField(null=True, blank=True)
    payload = JSONTextField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["instance", "step_id"], name="workerflow_step_id_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.step_id!r} ({self.state})"


class StepEvent(models.Model):
    """One entry of a step's history: an attempt, a wait or a sleep transition."""

    instance = models.ForeignKey(
        WorkflowInstance, on_delete=models.CASCADE, related_name="step_events"
    )
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=24, choices=StepEventType.choices)
    attempt_number = models.PositiveIntegerField(null=True, blank=True)
    result = JSONTextField(null=True, blank=True)
    error_name = models.CharField(max_length=200, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    wake_at = models.DateTimeField(null=True, blank=True)
    event_name = models.CharField(max_length=200, blank=True, default="")
    timeout_at = models.DateTimeField(null=True, blank=True)
    payload = JSONTextField(null=True, blank=True)
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["recorded_at", "id"]

    def __str__(self) -> str:
        return f"{self.type} of step #{self.step_id}"


class WorkflowEvent(models.Model):
    """One entry of an instance's lifecycle history."""

    instance = models.ForeignKey(
        WorkflowInstance, on_delete=models.CASCADE, related_name="workflow_events"
    )
    type = models.CharField(max_length=16, choices=WorkflowEventType.choices)
    reason = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL: no reason given
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["recorded_at", "id"]

    def __str__(self) -> str:
        return self.type


class InboundEvent(models.Model):
    """An event sent to an instance: claimed by a wait step, or queued until one claims it."""

    instance = models.ForeignKey(
        WorkflowInstance, on_delete=models.CASCADE, related_name="inbound_events"
    )
    event_name = models.CharField(max_length=200)
    payload = JSONTextField(null=True, blank=True)
    created_at = models.DateTimeField()
    claimed_by = models.OneToOneField(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="claimed_event"
    )
    claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(
                fields=["instance", "event_name", "created_at"],
                name="workerflow_inbound_queued",
                condition=Q(claimed_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return self.event_name
