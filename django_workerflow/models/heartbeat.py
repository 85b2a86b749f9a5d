"""When the workers last reported: the health probe's evidence that a cluster takes work."""

from __future__ import annotations

from django.db import models

from django_workerflow.models.fields import EngineDateTimeField


class WorkerHeartbeat(models.Model):
    """One row per task queue: when a worker last ran the sweeper from it.

    The sweeper runs every ``WORKERFLOW_SWEEP_SECONDS`` as a task of the queue, so a queue
    whose ``beat_at`` is old is one whose workers take no task: down, or wedged.
    ``next_beat_at`` is the due time of the one sweeper task the chain has queued (see
    :mod:`django_workerflow.workers.sweep_chain`).
    """

    queue = models.CharField(max_length=100, unique=True)
    beat_at = EngineDateTimeField()
    next_beat_at = EngineDateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.queue} at {self.beat_at.isoformat()}"
