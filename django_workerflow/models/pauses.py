"""Definition pauses: the switch that holds every instance of a definition, and its audit.

A :class:`DefinitionPause` row exists while a definition is paused; the tick's claim and the
fence of every step start (:data:`~django_workerflow.store.sql.LEASE_HELD_RUNNING`) look it
up, so the switch holds in every cluster at once and survives restarts. Each pause and resume
also appends a :class:`DefinitionPauseRecord`, which is never updated.
"""

from __future__ import annotations

from django.db import models

from django_workerflow.models.fields import EngineDateTimeField
from django_workerflow.values.states import DefinitionPauseAction


class DefinitionPause(models.Model):
    """One row per paused definition (by name, every version): who paused it, when, why."""

    definition_name = models.CharField(max_length=200, unique=True)
    reason = models.TextField()
    paused_by = models.CharField(max_length=150, blank=True)
    paused_at = EngineDateTimeField()

    class Meta:
        ordering = ["definition_name"]
        permissions = [("pause_definition", "Can pause and resume whole definitions")]

    def __str__(self) -> str:
        return f"{self.definition_name} paused at {self.paused_at.isoformat()}"


class DefinitionPauseRecord(models.Model):
    """One pause or resume of a definition, as it happened (append-only)."""

    definition_name = models.CharField(max_length=200)
    action = models.CharField(max_length=20, choices=DefinitionPauseAction.choices)
    actor = models.CharField(max_length=150, blank=True)
    reason = models.TextField(blank=True)
    at = EngineDateTimeField()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["definition_name", "-at"], name="workerflow_pause_record_name")
        ]

    def __str__(self) -> str:
        return f"{self.definition_name} {self.action} at {self.at.isoformat()}"
