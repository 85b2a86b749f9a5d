"""Rows on the tick's fixed path, read and written by named statements (:mod:`.sql`).

Django's query compiler costs 0.3 to 1.3 ms a query on our machines, several times the
statement it builds; a tick that claims, loads, settles and finishes an instance used to
compile about ten of them, more than the run steps of a short workflow cost. These
functions send the same statements without the compiler, and convert values exactly as
the ORM does (each column's backend and field converters).

The ORM's ``save()`` and ``create()`` send ``pre_save`` and ``post_save``; while any
receiver is connected for the model, the writes here go through the ORM so they still do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Field, Model
from django.db.models.signals import post_save, pre_save

from django_workerflow.models import WorkflowInstance
from django_workerflow.models.history import WorkflowEvent
from django_workerflow.store import executor, sql

Converter = Callable[[Any, Any, Any], Any]


@cache
def _converters(
    model: type[Model], columns: tuple[str, ...], vendor: str
) -> tuple[tuple[Field[Any, Any], tuple[Converter, ...]], ...]:
    """Each column's field and the converters the ORM applies to its values."""
    by_column = {field.column: field for field in model._meta.concrete_fields}
    table = model._meta.db_table
    found = []
    for column in columns:
        field = by_column[column]
        col = field.get_col(table)
        chain = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        found.append((field, tuple(chain)))
    return tuple(found)


def converted(model: type[Model], columns: tuple[str, ...], row: Sequence[Any]) -> list[Any]:
    """A row of ``model``'s ``columns`` as the ORM would return its values."""
    values = []
    for (field, chain), value in zip(
        _converters(model, columns, connection.vendor), row, strict=True
    ):
        for convert in chain:
            value = convert(value, field, connection)
        values.append(value)
    return values


@cache
def _attnames() -> list[str]:
    return [field.attname for field in WorkflowInstance._meta.concrete_fields]


def read_instance(pk: int, *, lock: bool) -> WorkflowInstance | None:
    """The instance ``pk`` (None if it is gone); ``lock``: under its row lock."""
    name = "lock_instance" if lock and connection.vendor == "postgresql" else "read_instance"
    with connection.cursor() as cursor:
        executor.execute(cursor, name, {"instance": pk})
        row = cursor.fetchone()
    if row is None:
        return None
    values = converted(WorkflowInstance, sql.INSTANCE_COLUMNS, row)
    return WorkflowInstance.from_db(connection.alias, _attnames(), values)


@cache
def _fields_by_name() -> dict[str, Field[Any, Any]]:
    """The instance's concrete fields by name (a foreign key also by its ``_id`` name)."""
    fields = WorkflowInstance._meta.concrete_fields
    return {**{f.name: f for f in fields}, **{f.attname: f for f in fields}}


def _signalled(model: type[Model]) -> bool:
    return pre_save.has_listeners(model) or post_save.has_listeners(model)


def save_fields(instance: WorkflowInstance, fields: Sequence[str]) -> None:
    """``instance.save(update_fields=fields)`` in one UPDATE by primary key."""
    if _signalled(WorkflowInstance) or instance._state.db not in (None, connection.alias):
        instance.save(update_fields=fields)
        return
    by_name = _fields_by_name()
    model_fields = [by_name[name] for name in fields]
    columns = tuple(str(field.column) for field in model_fields)
    values = [
        field.get_db_prep_save(getattr(instance, field.attname), connection)
        for field in model_fields
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql.update_instance(columns), [*values, instance.pk])


def record_event(instance_pk: int, event_type: str, reason: str | None, now: datetime) -> None:
    """Insert a workflow event (a status change) of the instance."""
    if _signalled(WorkflowEvent):
        WorkflowEvent.objects.create(
            instance_id=instance_pk, type=event_type, reason=reason, recorded_at=now
        )
        return
    with connection.cursor() as cursor:
        executor.execute(
            cursor,
            "insert_workflow_event",
            {
                "instance": instance_pk,
                "type": event_type,
                "reason": reason,
                "now": connection.ops.adapt_datetimefield_value(now),
            },
        )
