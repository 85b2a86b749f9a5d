"""The instance row's own writes: one ``UPDATE`` by primary key, one workflow event insert.

Every transition of :class:`~django_workerflow.models.instance.WorkflowInstance` saves
through these; one that changes the status writes only while the row has the status it was
read with. They send the statements Django would build, without its query compiler (0.3 to
0.5 ms a statement on our machines, more than the statement itself), and convert each value
with the field's own ``get_db_prep_save``. While any ``pre_save`` or ``post_save`` receiver
is connected for the model, they go through the ORM so those signals still fire. Their full
texts are checked in with every other statement (``tests/sql/model/``).

Why here and not in :mod:`.sql`: the model's transitions call these, so
``django_workerflow.models.instance`` imports this module while ``django_workerflow.models``
is still loading, and :mod:`.sql` (with :mod:`.executor`, which reads its statements) reads
the models' tables when it is imported. This module therefore imports nothing of
``django_workerflow``: its texts are built from the table and column names it is handed,
and it runs them on a plain cursor. It is the one import of the store from below it (the
models layer), listed with its reason in pyproject's import contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Field, Model
from django.db.models.signals import post_save, pre_save


@cache
def update_statement(table: str, columns: tuple[str, ...], guard: str | None = None) -> str:
    """Set ``columns`` of one row of ``table`` (parameters: their values in order, then its
    id); with a ``guard`` column, only while it still has a value (the last parameter)."""
    assignments = ", ".join(f"{column} = %s" for column in columns)
    where = f"id = %s AND {guard} = %s" if guard else "id = %s"
    return f"UPDATE {table} SET {assignments} WHERE {where}"


@cache
def move_statement(table: str, columns: tuple[str, ...], event_table: str) -> str:
    """PostgreSQL: the guarded :func:`update_statement` and its workflow event in one
    statement (parameters: the update's, then the event's type, reason and time); the event
    is inserted only if the row moved, and the statement's row count says whether it did."""
    moved = update_statement(table, columns, "status")
    return (
        f"WITH moved AS ({moved} RETURNING id) "
        f"INSERT INTO {event_table} (instance_id, type, reason, recorded_at) "
        "SELECT id, %s, %s, %s FROM moved"
    )


def insert_event_statement(table: str) -> str:
    """Insert one workflow event of an instance (parameters: instance, type, reason, time)."""
    return f"INSERT INTO {table} (instance_id, type, reason, recorded_at) VALUES (%s, %s, %s, %s)"


@cache
def _fields_by_name(model: type[Model]) -> dict[str, Field[Any, Any]]:
    """The model's concrete fields by name (a foreign key also by its ``_id`` name)."""
    fields = model._meta.concrete_fields
    return {**{f.name: f for f in fields}, **{f.attname: f for f in fields}}


def _event_time(event_model: type[Model], now: datetime) -> Any:
    """``now`` as the driver takes it for the event's ``recorded_at`` (an engine datetime:
    its field converts it whatever ``USE_TZ`` says)."""
    return _fields_by_name(event_model)["recorded_at"].get_db_prep_save(now, connection)


def signalled(model: type[Model]) -> bool:
    """True while a ``pre_save`` or ``post_save`` receiver is connected for ``model``: its
    rows are then written through the ORM, so that the signals fire."""
    return pre_save.has_listeners(model) or post_save.has_listeners(model)


def _columns_and_values(
    instance: Model, fields: Sequence[str]
) -> tuple[tuple[str, ...], list[Any]]:
    """The columns of ``fields`` and their values as the database takes them (each field's
    own ``get_db_prep_save``)."""
    by_name = _fields_by_name(type(instance))
    model_fields = [by_name[name] for name in fields]
    columns = tuple(str(field.column) for field in model_fields)
    values = [
        field.get_db_prep_save(getattr(instance, field.attname), connection)
        for field in model_fields
    ]
    return columns, values


def save_fields(instance: Model, fields: Sequence[str], *, status_was: str | None = None) -> bool:
    """``instance.save(update_fields=fields)`` in one UPDATE by primary key; with
    ``status_was``, only if the row's status is still that (False: nothing was written).

    The caller holds the row lock, so the guard costs nothing but a condition in the same
    statement (a read before the save on the ORM's path); it catches a caller that wrote on
    a row read without the lock.
    """
    model = type(instance)
    if signalled(model) or instance._state.db not in (None, connection.alias):
        if status_was is not None:
            rows = model._default_manager.using(instance._state.db or connection.alias)
            if not rows.filter(pk=instance.pk, status=status_was).exists():
                return False
        instance.save(update_fields=fields)
        return True
    columns, values = _columns_and_values(instance, fields)
    guard = None if status_was is None else "status"
    with connection.cursor() as cursor:
        cursor.execute(
            update_statement(model._meta.db_table, columns, guard),
            [*values, instance.pk] if guard is None else [*values, instance.pk, status_was],
        )
        written: bool = cursor.rowcount == 1
    return written


def move_with_event(
    instance: Model,
    fields: Sequence[str],
    status_was: str,
    event: tuple[type[Model], str, str | None, datetime],
) -> bool | None:
    """On PostgreSQL, :func:`save_fields` guarded by ``status_was`` and :func:`record_event`
    of ``event`` (its model, type, reason and time) in one statement: True if the row moved
    (and its event is recorded), False if its status was no longer ``status_was`` (nothing
    written). None where it does not apply (another database, a receiver that needs the
    ORM): the caller then writes the two statements."""
    model = type(instance)
    event_model, event_type, reason, now = event
    if (
        connection.vendor != "postgresql"
        or signalled(model)
        or signalled(event_model)
        or instance._state.db not in (None, connection.alias)
    ):
        return None
    columns, values = _columns_and_values(instance, fields)
    statement = move_statement(model._meta.db_table, columns, event_model._meta.db_table)
    when = _event_time(event_model, now)
    with connection.cursor() as cursor:
        cursor.execute(
            statement,
            [
                *values,
                instance.pk,
                status_was,
                event_type,
                reason,
                when,
            ],
        )
        moved: bool = cursor.rowcount == 1
    return moved


def record_event(
    event_model: type[Model], instance_pk: int, event_type: str, reason: str | None, now: datetime
) -> None:
    """Insert a workflow event (a status change) of the instance."""
    if signalled(event_model):
        event_model._default_manager.create(
            instance_id=instance_pk, type=event_type, reason=reason, recorded_at=now
        )
        return
    with connection.cursor() as cursor:
        cursor.execute(
            insert_event_statement(event_model._meta.db_table),
            [instance_pk, event_type, reason, _event_time(event_model, now)],
        )
