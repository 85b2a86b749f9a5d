"""Stored replay verdicts: whether the code a fingerprint names can replay an instance.

One row per checked instance, written in the background
(:mod:`django_workerflow.deploy.verdicts`), never by a tick. A row is current only while its
``code`` is the fingerprint of the definitions the reading process has registered; after a
deploy every row is stale until it is checked again, and a reader shows a stale row as "not
checked yet".

The link to the instance has no database constraint: a purge deletes instances with raw
statements (:mod:`django_workerflow.runtime.purge`) and must not meet this table; the
background pass deletes the rows of finished and deleted instances instead.
"""

from __future__ import annotations

from django.db import models

from django_workerflow.models.fields import EngineDateTimeField
from django_workerflow.models.instance import WorkflowInstance


class ReplayVerdictRecord(models.Model):
    """Whether the code fingerprinted ``code`` replays the instance's history, and if not why."""

    instance = models.OneToOneField(
        WorkflowInstance,
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="replay_verdict_record",
    )
    code = models.CharField(max_length=64)
    ok = models.BooleanField()
    reason = models.TextField(blank=True)
    checked_at = EngineDateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["code", "ok"], name="workerflow_verdict_code_ok"),
            # The stranded ones, usually few: the filter's "no" reads them from here.
            models.Index(
                fields=["code"], condition=models.Q(ok=False), name="workerflow_verdict_stranded"
            ),
        ]

    def __str__(self) -> str:
        return f"instance {self.instance_id}: {'replays' if self.ok else 'stranded'}"
