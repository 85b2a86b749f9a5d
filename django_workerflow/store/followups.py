"""What an instance's finish has to follow up, read in the finishing transaction's first
statement (:mod:`django_workerflow.runtime.finishing`): whether it has unfinished children
and instances waiting for it, with the finishing tick's bell deleted and, on PostgreSQL,
the ``wait_result`` callers woken (on commit) by the same statement."""

from __future__ import annotations

from typing import Any

from django.db import connection

from django_workerflow.store import bell_queue, executor, sql


def read(
    instance_pk: int, *, channel: str, bell: int | None = None, queue_table: str = ""
) -> tuple[bool, bool]:
    """Whether the instance has unfinished children, and instances waiting for it.
    ``channel``: the NOTIFY channel of its finish (PostgreSQL). ``bell``: the bell of the
    finishing tick, a row of ``queue_table``, deleted in this transaction (on PostgreSQL by
    the same statement, on SQLite by one more before it)."""
    values: dict[str, Any] = {"instance": instance_pk}
    postgresql = connection.vendor == "postgresql"
    if postgresql:
        values["channel"] = channel
    if bell is not None and not postgresql:
        bell_queue.delete(connection, queue_table, bell)
    with connection.cursor() as cursor:
        if bell is not None and postgresql:
            name = "finish_followups_acknowledging"
            text = sql.queue_statement(name, queue_table)
            values = sql.params(bell=bell, **values)
            row = executor.execute(cursor, name, values, text=text, prepare=False).fetchone()
        else:
            name = "finish_followups_notify" if postgresql else "finish_followups"
            row = executor.execute(cursor, name, sql.params(**values)).fetchone()
    return bool(row[0]), bool(row[1])
