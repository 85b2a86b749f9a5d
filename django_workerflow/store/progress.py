"""An instance's progress on its row: written by the tick holding the lease, read by anyone.

The tick never commits for progress alone: the value a pass reports is held in memory
(:class:`PendingProgress`) and written in the transaction of the pass's next step write
or of its settle, whichever comes first. On PostgreSQL that write NOTIFYs the instance's
progress channel (on commit), which ``wait_progress`` listens on.
"""

from __future__ import annotations

from typing import Any

from django.db import connection

from django_workerflow.models import WorkflowInstance
from django_workerflow.models.fields import engine_datetime
from django_workerflow.store import executor, sql
from django_workerflow.values import progress as values
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.progress import Progress


def channel(instance_pk: int) -> str:
    """The PostgreSQL NOTIFY channel of an instance's progress."""
    return f"workerflow_progress_{instance_pk}"


def read(instance_pk: int) -> tuple[str, Progress | None] | None:
    """The instance's status and progress, read afresh (None: no such instance)."""
    row = (
        WorkflowInstance.objects.filter(pk=instance_pk)
        .values_list(
            "status", "progress_current", "progress_total", "progress_message", "progress_at"
        )
        .first()
    )
    if row is None:
        return None
    return row[0], values.from_row(*row[1:])


class PendingProgress:
    """The progress one tick's passes report: what the row holds, and what to write next.

    A pass replays the calls of the passes before it, so a call that reports what the row
    already holds writes nothing: only the last value a pass reports, if it differs.
    """

    def __init__(self, instance_pk: int, token: str, stored: Progress | None) -> None:
        self.instance_pk = instance_pk
        self.token = token
        self.stored = stored
        self.pending: Progress | None = None

    def report(self, current: object, total: object, message: object) -> None:
        """Hold ``current`` of ``total`` with ``message`` for the next write, or raise
        WorkflowInputError (and hold nothing new) for a value that cannot be stored."""
        current, total, message = values.checked(current, total, message)
        held = self.pending or self.stored
        if held is not None and (held.current, held.total, held.message) == (
            current,
            total,
            message,
        ):
            return
        value = Progress(current, total, message, clock_now())
        self.pending = None if value.same_report(self.stored) else value

    def write(self, cursor: Any) -> Progress | None:
        """Write the held value in the caller's transaction (fenced by the lease: nothing is
        written once it is lost); return it, for :meth:`written` once that commits."""
        value = self.pending
        if value is None:
            return None
        params = sql.params(
            instance=self.instance_pk,
            token=self.token,
            progress_current=float(value.current),
            progress_total=None if value.total is None else float(value.total),
            progress_message=value.message,
            progress_at=engine_datetime(value.updated_at, connection),
        )
        if connection.vendor == "postgresql":
            params["channel"] = channel(self.instance_pk)
            executor.execute(cursor, "write_progress_notify", params)
        else:
            executor.execute(cursor, "write_progress", params)
        return value

    def written(self, value: Progress | None) -> None:
        """``value`` (what :meth:`write` returned) committed: it is what the row holds."""
        if value is None:
            return
        self.stored = value
        if self.pending is value:
            self.pending = None
