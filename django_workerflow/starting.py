"""Writing new instances: one instance for ``start()``, many for ``start_many()``.

New instances, their 'created' workflow events and their bells are written by one
statement per batch on PostgreSQL (a data-modifying CTE: in autocommit one round trip and
one commit, after one read of the ids the bells name) and by one ``BEGIN IMMEDIATE``
transaction of three statements on SQLite. Rows
are inserted with ``ON CONFLICT (key) DO NOTHING``, so a key that exists (or is created
concurrently) writes nothing and is read back by the caller: starts stay idempotent by key.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import connection, transaction

from . import alarms, bell_rows, jsonvalue, registry
from .clock import now as clock_now
from .models import WorkflowInstance, WorkflowStatus
from .models.history import WorkflowEvent
from .signals import workflow_status_changed
from .states import WorkflowEventType

# The logger operators already configure (docs/operations.md lists its messages).
logger = logging.getLogger("django_workerflow.runtime")

#: The most rows one statement inserts.
BATCH_ROWS = 1000

INSTANCE = WorkflowInstance._meta.db_table
EVENT = WorkflowEvent._meta.db_table
# Quoted as both databases quote identifiers ("key" and "lock" are SQL keywords).
KEY = '"key"'
QUEUE_COLUMNS = '("key", "payload", "lock")'


@dataclass(frozen=True, slots=True)
class NewInstance:
    """A validated instance to create: its key and the JSON text of its input."""

    key: str
    input_json: str


def _columns() -> tuple[list[str], list[Any]]:
    """The instance table's columns (all but the id) and their field objects."""
    fields = [f for f in WorkflowInstance._meta.concrete_fields if not f.primary_key]
    return [str(f.column) for f in fields], fields


def start_one(
    name: str,
    version: str,
    entry: NewInstance,
    priority: int,
    parent_pk: int | None,
    detached: bool,
) -> WorkflowInstance | None:
    """``start()`` of a definition without a concurrency limit: the new instance, or None
    when its key is taken."""
    created = insert_pending(
        name,
        version,
        [entry],
        clock_now(),
        priority=priority,
        parent_pk=parent_pk,
        detached=detached,
    )
    if not created:
        return None
    logger.info("workflow created key=%s definition=%s version=%s", entry.key, name, version)
    return created[0]


def _template(name: str, version: str, now: datetime, bell: bool) -> WorkflowInstance:
    """A new pending instance without its key and input."""
    return WorkflowInstance(
        key="",
        definition_name=name,
        definition_version=version,
        input=None,
        status=WorkflowStatus.PENDING,
        alarm_at=now,
        bell_at=now if bell else None,
        created_at=now,
        updated_at=now,
    )


def _copy(template: WorkflowInstance, entry: NewInstance) -> WorkflowInstance:
    instance = WorkflowInstance(
        **{f.attname: getattr(template, f.attname) for f in WorkflowInstance._meta.concrete_fields}
    )
    instance.key = entry.key
    instance.input = None if entry.input_json == "null" else jsonvalue.loads(entry.input_json)
    return instance


def insert_pending(
    name: str,
    version: str,
    entries: Sequence[NewInstance],
    now: datetime,
    *,
    priority: int = 0,
    parent_pk: int | None = None,
    detached: bool = False,
) -> list[WorkflowInstance]:
    """Create pending instances (due at ``now``) for ``entries`` whose key is free, with
    their 'created' events and bells; return the created ones (keys taken are left out).

    At most :data:`BATCH_ROWS` entries; the caller splits larger sets.
    """
    if len(entries) > BATCH_ROWS:
        raise ValueError(f"insert_pending writes at most {BATCH_ROWS} rows at a time.")
    direct_bells = bell_rows.direct_orm_bells()
    columns, fields = _columns()
    template = _template(name, version, now, direct_bells)
    # A child workflow's parent (set by a parent's child step, see child_steps.py).
    template.parent_id = parent_pk
    template.detached = detached
    # Admitted at once: starts of definitions with a concurrency limit take runtime's path.
    template.priority = priority
    template.admitted_at = now
    values = [f.get_db_prep_save(f.value_from_object(template), connection) for f in fields]
    key_at = columns.index(str(WorkflowInstance._meta.get_field("key").column))
    input_at = columns.index(str(WorkflowInstance._meta.get_field("input").column))
    rows = []
    for entry in entries:
        row = list(values)
        row[key_at] = entry.key
        # Already JSON text, validated by the caller: stored as is (a None input as NULL).
        row[input_at] = None if entry.input_json == "null" else entry.input_json
        rows.append(row)
    with _write_transaction() as cursor:
        created = _insert(cursor, columns, rows, direct_bells, now)
        if not direct_bells:
            # Another broker, or django-q2 elsewhere: ring through alarms (same transaction).
            for created_pk in created.values():
                alarms.arm(created_pk, now)
    armed = direct_bells or (not alarms.is_suppressed() and apps.is_installed("django_q"))
    template.bell_at = now if armed else None
    result = []
    for entry in entries:
        pk = created.get(entry.key)
        if pk is None:
            continue
        instance = _copy(template, entry)
        instance.pk = pk
        instance._state.adding = False
        instance._state.db = connection.alias
        result.append(instance)
        created.pop(entry.key)  # a key given twice is created once
    _announce(result)
    return result


@contextmanager
def _write_transaction() -> Iterator[Any]:
    """PostgreSQL: the one statement is its own transaction (or part of the caller's).
    SQLite: one IMMEDIATE transaction, or a savepoint inside the caller's."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    if connection.in_atomic_block:
        with transaction.atomic(), connection.cursor() as cursor:
            yield cursor
        return
    with connection.cursor() as cursor:
        cursor.execute("BEGIN IMMEDIATE")
        try:
            yield cursor
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        cursor.execute("COMMIT")


def _insert(
    cursor: Any, columns: list[str], rows: list[list[Any]], bells: bool, now: datetime
) -> dict[str, int]:
    """Insert the rows, their events and (``bells``) their bells; return the created keys'
    ids. A bell carries the instance id, so PostgreSQL reads the ids first."""
    when = bell_rows.due(now)
    created_event = [WorkflowEventType.CREATED, when]
    if connection.vendor == "postgresql":
        ids = _next_ids(cursor, len(rows)) if bells else []
        if bells:
            columns = ["id", *columns]
            rows = [[pk, *row] for pk, row in zip(ids, rows, strict=True)]
        select, params = _unnest_rows(columns, rows)
        text = (
            f"WITH new AS (INSERT INTO {INSTANCE} ({', '.join(columns)}) {select} "
            f"ON CONFLICT ({KEY}) DO NOTHING RETURNING id, {KEY}), created AS (INSERT INTO "
            f"{EVENT} (instance_id, type, reason, recorded_at) SELECT id, %s, NULL, %s FROM new)"
        )
        params += created_event
        if bells:
            text += (
                f", bells AS (INSERT INTO {bell_rows.queue_table()} {QUEUE_COLUMNS} "
                "SELECT %s, b.payload, %s::timestamptz FROM new JOIN "
                "unnest(%s::bigint[], %s::text[]) AS b(instance_id, payload) "
                "ON b.instance_id = new.id)"
            )
            params += [bell_rows.list_key(), when, ids, [bell_rows.payload(pk) for pk in ids]]
        cursor.execute(text + f" SELECT id, {KEY} FROM new", params)
        return {key: pk for pk, key in cursor.fetchall()}
    cursor.execute(_insert_rows(columns, len(rows)), [value for row in rows for value in row])
    created = {key: pk for pk, key in cursor.fetchall()}
    if not created:
        return created
    cursor.execute(
        f"INSERT INTO {EVENT} (instance_id, type, reason, recorded_at) VALUES "
        + ", ".join(["(%s, %s, NULL, %s)"] * len(created)),
        [value for pk in created.values() for value in (pk, *created_event)],
    )
    if bells:
        list_key = bell_rows.list_key()
        cursor.execute(
            f"INSERT INTO {bell_rows.queue_table()} {QUEUE_COLUMNS} VALUES "
            + ", ".join(["(%s, %s, %s)"] * len(created)),
            [v for pk in created.values() for v in (list_key, bell_rows.payload(pk), when)],
        )
    return created


def _unnest_rows(columns: list[str], rows: list[list[Any]]) -> tuple[str, list[Any]]:
    """PostgreSQL: a SELECT of ``rows`` with one parameter per column (an array where the
    rows differ), so a batch's text and parameters stay small whatever its size."""
    types = {str(f.column): f.db_type(connection) for f in WorkflowInstance._meta.concrete_fields}
    types["id"] = "bigint"
    outputs, arrays, params, array_params = [], [], [], []
    for index, column in enumerate(columns):
        values = [row[index] for row in rows]
        if all(value == values[0] for value in values):
            outputs.append(f"%s::{types[column]}")
            params.append(values[0])
        else:
            outputs.append(f"v.c{index}")
            arrays.append((index, column))
            array_params.append(values)
    select = f"SELECT {', '.join(outputs)}"
    if arrays:  # else one row (a single start)
        unnest = ", ".join(f"%s::{types[column]}[]" for _index, column in arrays)
        names = ", ".join(f"c{index}" for index, _column in arrays)
        select += f" FROM unnest({unnest}) AS v({names})"
    # The unnest's parameters come after the select list's in the text.
    return select, params + array_params


def _insert_rows(columns: list[str], count: int) -> str:
    marks = "(" + ", ".join(["%s"] * len(columns)) + ")"
    return (
        f"INSERT INTO {INSTANCE} ({', '.join(columns)}) VALUES "
        + ", ".join([marks] * count)
        + f" ON CONFLICT ({KEY}) DO NOTHING RETURNING id, {KEY}"
    )


_sequences: dict[str, str] = {}


def _next_ids(cursor: Any, count: int) -> list[int]:
    """PostgreSQL: ``count`` ids drawn from the instance table's sequence."""
    if INSTANCE not in _sequences:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [INSTANCE])
        _sequences[INSTANCE] = cursor.fetchone()[0]
    if count == 1:
        cursor.execute("SELECT nextval(%s)", [_sequences[INSTANCE]])
    else:
        cursor.execute(
            "SELECT nextval(%s) FROM generate_series(1, %s)", [_sequences[INSTANCE], count]
        )
    return [row[0] for row in cursor.fetchall()]


def _announce(instances: list[WorkflowInstance]) -> None:
    """Send workflow_status_changed (None -> pending) for each, once committed."""

    if not instances:
        return
    first = instances[0]  # a batch is of one definition and version
    sender = registry.lookup(first.definition_name, first.definition_version)
    if not workflow_status_changed.has_listeners(sender):
        return
    fields = WorkflowInstance._meta.concrete_fields
    # Copies: the caller's objects may change before the commit (the signal reports this one).
    snapshots = [
        WorkflowInstance(**{f.attname: getattr(instance, f.attname) for f in fields})
        for instance in instances
    ]

    def send() -> None:
        for instance in snapshots:
            workflow_status_changed.send(
                sender=sender,
                instance=instance,
                status=WorkflowStatus.PENDING,
                previous_status=None,
            )

    transaction.on_commit(send)
