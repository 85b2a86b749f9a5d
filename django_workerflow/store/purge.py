"""The purge's deletes: a set of instances' rows, one ``DELETE`` per table, in the caller's
transaction (see :mod:`django_workerflow.runtime.purge`)."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connections
from django.db.models import Model

from django_workerflow.store import executor, sql


def delete_rows(using: str, models: Sequence[type[Model]], pks: list[int]) -> list[int]:
    """Delete the rows of each of ``models`` that point at the instances ``pks``, then the
    instances, on the database ``using``; how many went of each (the instances last)."""
    counts = []
    with connections[using].cursor() as cursor:
        for table in [*(model._meta.db_table for model in models), sql.INSTANCE]:
            text = sql.purge_statement(table, len(pks))
            executor.execute(cursor, "purge", pks, text=text, prepare=False)
            counts.append(cursor.rowcount)
    return counts
