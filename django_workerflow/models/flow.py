"""The tables of schedules and flow control: one row per scheduled workflow, and the gates
that serialise admission to a concurrency-limited workflow."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from django_workerflow.models.fields import EngineDateTimeField

#: WorkflowInstance's indexes for flow control (admission.py).
FLOW_INDEXES = [
    # The queue of a limited workflow, in admission order.
    models.Index(
        fields=["definition_name", "concurrency_key", "priority", "created_at", "id"],
        name="workerflow_queue",
        condition=Q(status="pending", admitted_at__isnull=True),
    ),
    # Slots in use: admitted and not finished (a small set however long the history).
    models.Index(
        fields=["definition_name", "concurrency_key"],
        name="workerflow_slots",
        condition=Q(admitted_at__isnull=False, status__in=["pending", "running", "paused"]),
    ),
    # The admissions inside a rate-limit window.
    models.Index(
        fields=["definition_name", "concurrency_key", "admitted_at"],
        name="workerflow_admitted",
        condition=Q(admitted_at__isnull=False),
    ),
]


class WorkflowSchedule(models.Model):
    """A scheduled workflow: its cron, where the schedule stands, and whether it runs.

    Rows are kept in sync with the definitions by :mod:`django_workerflow.runtime.flow.schedules`
    (at ``migrate`` and when a worker's sweeper first runs). A schedule removed from the
    code is disabled (``in_code`` false), never deleted; an operator may disable one too.
    """

    name = models.CharField(max_length=200, unique=True)
    cron = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64)
    catch_up = models.BooleanField(default=False)
    enabled = models.BooleanField(default=True)
    # False once the definition no longer declares the schedule (it is disabled then).
    in_code = models.BooleanField(default=True)
    next_run_at = EngineDateTimeField(null=True, blank=True)
    last_run_at = EngineDateTimeField(null=True, blank=True)
    # When the last bell queued for next_run_at rings (None: none queued).
    bell_at = EngineDateTimeField(null=True, blank=True)
    updated_at = EngineDateTimeField()

    class Meta:
        ordering = ["name"]
        permissions = [("run_workflowschedule", "Can run scheduled workflows now")]

    def __str__(self) -> str:
        return f"{self.name} ({self.cron}, {self.timezone})"

    def note_bell(self) -> None:
        """Record that the bell of ``next_run_at`` is queued."""
        self.bell_at = self.next_run_at
        self.save(update_fields=["bell_at"])


class AdmissionGate(models.Model):
    """The row an admission locks: one per workflow name and concurrency key.

    Every decision to admit a queued instance (and every start of a limited workflow) is
    taken under this row's lock, so counting the slots in use and taking one are atomic
    whatever the number of workers.
    """

    definition_name = models.CharField(max_length=200)
    concurrency_key = models.CharField(max_length=255, blank=True, default="")
    locked_at = EngineDateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["definition_name", "concurrency_key"], name="workerflow_gate_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.definition_name}[{self.concurrency_key}]"
