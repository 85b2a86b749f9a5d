"""Each process's flushed totals: its counters and histograms, written from its memory
(``process_counters.PROCESS_COUNTERS``) to a row of its own."""

from __future__ import annotations

from django.db import models

from django_workerflow.models.fields import EngineDateTimeField


class ProcessMetrics(models.Model):
    """One row per process that observed something: its cumulative totals as of
    ``flushed_at`` (see :mod:`django_workerflow.process_counters` for the document's shape).

    A process rewrites only its own row, at most every ``WORKERFLOW_SWEEP_SECONDS``. The
    row of a process that died stays, so its counts stay in the fleet's counters (which
    never go down); what it observed after its last flush is lost.
    """

    process = models.UUIDField(unique=True)
    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    flushed_at = EngineDateTimeField()
    totals = models.JSONField()

    class Meta:
        verbose_name_plural = "process metrics"

    def __str__(self) -> str:
        return f"{self.host}:{self.pid} at {self.flushed_at.isoformat()}"
