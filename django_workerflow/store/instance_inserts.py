"""Inserting new instances: their rows as the database takes them, and the statements that
write them with their 'created' events and bells, both databases side by side.

On PostgreSQL one statement per batch (a data-modifying CTE over ``unnest`` of one array
a column whose rows differ), and for a single start with its bell one statement whose id
comes from :data:`~.instance_ids.id_block`: a bell names its instance's id, so the ids
come from the table's sequence before the statement. On SQLite three statements (the
rows, their events, their bells) in the caller's ``BEGIN IMMEDIATE`` transaction. Rows are
inserted with ``ON CONFLICT DO NOTHING``: a key that exists writes nothing and is left out
of the answer. The texts are composed by :mod:`.sql` (``start_*``, ``insert_*``) and run
through :func:`.executor.execute`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, models

from django_workerflow.models import WorkflowInstance
from django_workerflow.models.fields import engine_datetime
from django_workerflow.store import executor, sql
from django_workerflow.store.instance_ids import draw_ids, id_block
from django_workerflow.values.states import WorkflowEventType

# Draws of a fresh id for one start before giving up (see _insert_one).
ID_ATTEMPTS = 3

INSTANCE = WorkflowInstance._meta.db_table


@dataclass(frozen=True, slots=True)
class Layout:
    """The instance table's columns (all but the id) and their fields, read once: the
    model's metadata does not change while the process runs."""

    columns: tuple[str, ...]
    fields: tuple[Any, ...]
    key_at: int
    input_at: int
    attributes_at: int
    created_at: int
    datetimes: frozenset[int]  # DateTimeFields: one preparation serves them all


@functools.cache
def layout() -> Layout:
    """The instance table's :class:`Layout`."""
    fields = tuple(f for f in WorkflowInstance._meta.concrete_fields if not f.primary_key)
    columns = tuple(str(f.column) for f in fields)
    names = [f.name for f in fields]
    return Layout(
        columns=columns,
        fields=fields,
        key_at=names.index("key"),
        input_at=names.index("input"),
        attributes_at=names.index("attributes"),
        created_at=names.index("created_at"),
        datetimes=frozenset(
            index for index, f in enumerate(fields) if isinstance(f, models.DateTimeField)
        ),
    )


@dataclass(frozen=True, slots=True)
class BellRows:
    """The bells of new instances as django-q2's queue rows: its table, its list key, the
    due time (as the driver takes it) and the signed payload of an instance's tick."""

    queue_table: str
    list_key: str
    due: Any
    payload: Callable[[int], str]


def prepared(template: WorkflowInstance, chosen: dict[str, Any], now: datetime) -> list[Any]:
    """The values of ``template`` (a new instance; ``chosen``: the attributes its caller set)
    as the database takes them, in :attr:`Layout.columns` order. The defaults are prepared
    once per process and database, and ``now`` (in up to five columns) once per call:
    preparing a datetime, with its time zone checks, was the largest share of this."""
    table = layout()
    defaults = _prepared_defaults(connection.vendor)
    prepared_now = table.fields[table.created_at].get_db_prep_save(now, connection)
    values = []
    for index, field in enumerate(table.fields):
        if field.attname not in chosen and index in defaults:
            values.append(defaults[index])
            continue
        value = getattr(template, field.attname)
        if value is now and index in table.datetimes:
            values.append(prepared_now)
        else:
            values.append(field.get_db_prep_save(value, connection))
    return values


def prepared_attributes(attributes: dict[str, Any]) -> Any:
    """An instance's attributes as the database takes them (a checked JSON object)."""
    table = layout()
    return table.fields[table.attributes_at].get_db_prep_save(attributes, connection)


@functools.cache
def _prepared_defaults(vendor: str) -> dict[int, Any]:
    """The prepared defaults of the columns whose default is a constant, by index
    (``vendor`` keys the cache: preparing is the connection's)."""
    fields = layout().fields
    return {
        index: field.get_db_prep_save(field.get_default(), connection)
        for index, field in enumerate(fields)
        if not (field.has_default() and callable(field.default))
    }


def insert(
    cursor: Any,
    rows: list[list[Any]],
    bells: BellRows | None,
    now: datetime,
    priority: int,
) -> dict[str, int]:
    """Insert the instance ``rows`` (prepared, in :attr:`Layout.columns` order), their
    'created' events and (with ``bells``) their bells, which carry the rows' ``priority``;
    the created keys' ids. A bell carries the instance id, so PostgreSQL draws the ids
    first."""
    columns = layout().columns
    created_event = [WorkflowEventType.CREATED, engine_datetime(now, connection)]
    if connection.vendor == "postgresql":
        if bells is not None and len(rows) == 1:
            return _insert_one(cursor, columns, rows[0], created_event, bells)
        return _insert_batch(cursor, columns, rows, created_event, bells)
    created = {
        key: pk
        for pk, key in executor.execute(
            cursor,
            "insert_instances",
            [value for row in rows for value in row],
            text=sql.insert_instances_statement(columns, len(rows)),
            prepare=False,
        ).fetchall()
    }
    if not created:
        return created
    executor.execute(
        cursor,
        "insert_created_events",
        [value for pk in created.values() for value in (pk, *created_event)],
        text=sql.insert_created_events_statement(len(created)),
        prepare=False,
    )
    if bells is not None:
        executor.execute(
            cursor,
            "insert_bells",
            [
                v
                for pk in created.values()
                for v in (bells.list_key, bells.payload(pk), bells.due, priority)
            ],
            text=sql.insert_bells_statement(bells.queue_table, len(created)),
            prepare=False,
        )
    return created


def _insert_batch(
    cursor: Any,
    columns: tuple[str, ...],
    rows: list[list[Any]],
    created_event: list[Any],
    bells: BellRows | None,
) -> dict[str, int]:
    """PostgreSQL: a batch of instances, their events and bells in one statement."""
    ids = draw_ids(cursor, len(rows)) if bells is not None else []
    if bells is not None:
        columns = ("id", *columns)
        rows = [[pk, *row] for pk, row in zip(ids, rows, strict=True)]
    select, params = _unnest_rows(columns, rows)
    text = sql.start_batch_statement(
        columns, select, bells.queue_table if bells is not None else None
    )
    params += created_event
    if bells is not None:
        params += [bells.list_key, bells.due, ids, [bells.payload(pk) for pk in ids]]
    found = executor.execute(cursor, "start_batch", params, text=text, prepare=False)
    return {key: pk for pk, key in found.fetchall()}


def _insert_one(
    cursor: Any,
    columns: tuple[str, ...],
    row: list[Any],
    created_event: list[Any],
    bells: BellRows,
) -> dict[str, int]:
    """PostgreSQL, one instance with its bell: one statement, its id from :data:`id_block`.

    The statement answers whether it created the row and whether the key existed before it.
    Neither means the id was taken (a block drawn before the sequence was reset, as by
    ``TRUNCATE ... RESTART IDENTITY`` or a test case's ``reset_sequences``), or a concurrent
    start of the same key committed while this one ran: a fresh block settles both. The
    conflict target is left out so that a taken id writes nothing instead of raising, which
    would abort the caller's transaction.
    """
    key = row[layout().key_at]
    text = sql.start_one_statement(columns, bells.queue_table)
    for _attempt in range(ID_ATTEMPTS):
        pk = id_block.take(cursor)
        params = [pk, *row, *created_event]
        params += [bells.list_key, bells.payload(pk), bells.due, key]
        created_pk, existed = executor.execute(cursor, "start_one", params, text=text).fetchone()
        if created_pk is not None:
            return {key: created_pk}
        if existed:
            return {}
        id_block.discard()
    raise IntegrityError(
        f"start() of key '{key}' wrote nothing {ID_ATTEMPTS} times, with fresh ids, and the "
        f"key is not taken: does {INSTANCE} have another unique constraint?"
    )


@functools.cache
def _db_types(vendor: str) -> dict[str, str | None]:
    """The instance table's column types (``vendor`` keys the cache: the types are the
    connection's)."""
    types = {str(f.column): f.db_type(connection) for f in WorkflowInstance._meta.concrete_fields}
    types["id"] = "bigint"
    return types


def _unnest_rows(columns: Sequence[str], rows: list[list[Any]]) -> tuple[str, list[Any]]:
    """PostgreSQL: a SELECT of ``rows`` with one parameter per column (an array where the
    rows differ), so a batch's text and parameters stay small whatever its size."""
    types = _db_types(connection.vendor)
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
    select = sql.unnest_select(
        outputs, [(f"c{index}", str(types[column])) for index, column in arrays]
    )
    # The unnest's parameters come after the select list's in the text.
    return select, params + array_params
