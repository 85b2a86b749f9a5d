"""Instance rows on the tick's fixed path, read by named statements (:mod:`.sql`).

Django's query compiler costs 0.3 to 1.3 ms a query on our machines, several times the
statement it builds; a tick that claims, loads, settles and finishes an instance used to
compile about ten of them, more than the run steps of a short workflow cost. These
functions send the same statements without the compiler, and convert values exactly as
the ORM does (each column's backend and field converters).

The instance's own writes are :mod:`.instance_writes` (the model's transitions call them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Field, Model

from django_workerflow.exceptions import StepStateError, WorkflowInputError
from django_workerflow.models import WorkflowEvent, WorkflowInstance
from django_workerflow.models.fields import engine_datetime
from django_workerflow.store import executor, lease, sql
from django_workerflow.store.instance_writes import signalled
from django_workerflow.values import jsonvalue, storable, transitions
from django_workerflow.values.states import WorkflowEventType, WorkflowStatus

Converter = Callable[[Any, Any, Any], Any]


def adapt(value: datetime | None) -> Any:
    """A datetime as the connection's driver takes it for an engine column."""
    return engine_datetime(value, connection)


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
    return _read(name, {"instance": pk})


@dataclass(frozen=True, slots=True)
class ClaimRead:
    """What the tick's claim reads in one statement: the instance under its row lock,
    whether any step of it is recorded, and whether its definition is paused."""

    instance: WorkflowInstance
    has_steps: bool
    definition_paused: bool
    #: The lease was taken by the same statement (:func:`claim`); the row is as it was read.
    claimed: bool = False


def read_for_claim(pk: int) -> ClaimRead | None:
    """The instance ``pk`` under its row lock, whether it has steps and whether its
    definition is paused (None if it is gone): the tick's claim reads them in one
    statement."""
    name = (
        "lock_instance_for_claim"
        if connection.vendor == "postgresql"
        else ("read_instance_for_claim")
    )
    with connection.cursor() as cursor:
        row = executor.execute(cursor, name, {"instance": pk}).fetchone()
    if row is None:
        return None
    return ClaimRead(_instance(row[:-2]), bool(row[-2]), bool(row[-1]))


def claim(pk: int, token: str, now: datetime) -> ClaimRead | None:
    """The tick's claim in one statement (PostgreSQL): :func:`read_for_claim`'s read, and
    the lease taken for ``token`` where every check SQL can make holds (``claimed``); the
    row is returned as read, before the claim. A pending instance moved to running is
    announced as its transition would be. None if the row is gone.
    Only where :func:`one_statement`."""
    values = sql.params(
        instance=pk,
        token=token,
        expires=adapt(lease.expiry(now)),
        now=adapt(now),
        status_pending=WorkflowStatus.PENDING,
        event_started=WorkflowEventType.STARTED,
    )
    with connection.cursor() as cursor:
        row = executor.execute(cursor, "claim_instance", values).fetchone()
    if row is None:
        return None
    return ClaimRead(_instance(row[:-3]), bool(row[-3]), bool(row[-2]), bool(row[-1]))


def mark_claimed(instance: WorkflowInstance, token: str, now: datetime) -> None:
    """Set on ``instance``, as read by :func:`claim`, what that statement wrote: the lease,
    and, for a pending instance, running (announced as
    :meth:`~django_workerflow.models.WorkflowInstance.start_running` would)."""
    previous = instance.status
    expires = lease.expiry(now)
    instance.lease_token = token
    instance.lease_expires_at = expires
    instance.alarm_at = expires
    instance.alarm_cause = ""
    instance.wake_requested = False
    if previous == WorkflowStatus.PENDING:
        transitions.check(instance.key, previous, WorkflowStatus.RUNNING)
        instance.status = WorkflowStatus.RUNNING
        instance.updated_at = now
    # The statement made the model's transition: the model announces it, as its own would.
    instance._announce(previous)  # noqa: SLF001 - the transition was written in SQL here


def complete(
    pk: int, token: str, result_json: str, success: tuple[int, int, str] | None, now: datetime
) -> WorkflowInstance | None:
    """A completed pass's settle in one statement (PostgreSQL): the instance, still running
    under ``token``'s lease, its definition not paused and no unreached step noted, moves
    to completed with ``result_json`` and its event, and ``success`` (the step's pk, its
    attempt and result), a success held in memory, is recorded with it, if the step still
    runs that attempt. The row written, announced; None if nothing matched (nothing is
    written: the caller settles as it would have).
    Only where :func:`one_statement`."""
    field = WorkflowInstance._meta.get_field("result")
    values = sql.params(
        instance=pk,
        token=token,
        now=adapt(now),
        instance_result=field.get_db_prep_save(jsonvalue.loads(result_json), connection),
        event_completed=WorkflowEventType.COMPLETED,
    )
    name = "complete_instance"
    if success is not None:
        name = "succeed_and_complete"
        values.update(step=success[0], attempt=success[1], result=success[2])
    with connection.cursor() as cursor:
        row = executor.execute(cursor, name, values).fetchone()
    if row is None:
        return None
    if success is not None:
        row, recorded = row[:-1], row[-1]
        if recorded != 1:
            # The lease is held, so no one else changed the step: this is a bug, not a race.
            raise StepStateError(
                f"Step {success[0]} of instance {pk} changed under a held lease; the settle "
                "is rolled back and the instance is looked at again when its lease expires."
            )
    instance = _instance(row)
    transitions.check(instance.key, WorkflowStatus.RUNNING, WorkflowStatus.COMPLETED)
    # The statement made the model's transition: the model announces it, as its own would.
    instance._announce(WorkflowStatus.RUNNING)  # noqa: SLF001 - the transition was written in SQL here
    return instance


def one_statement() -> bool:
    """Whether the tick's claim and its settle may each be one statement (:func:`claim`,
    :func:`complete`): on PostgreSQL (data-modifying ``WITH``), while no ``pre_save`` or
    ``post_save`` receiver needs the instance's or its events' writes to go through the
    ORM. Else they are the statements these fold."""
    return (
        connection.vendor == "postgresql"
        and not signalled(WorkflowInstance)
        and not signalled(WorkflowEvent)
    )


def lock_of(instance: WorkflowInstance | str) -> WorkflowInstance | None:
    """The instance given as itself or by its key, under its row lock: the lookup and the
    lock in one statement (None if there is none).

    Raises :class:`WorkflowInputError` for a key that is not storable text or anything else.
    """
    if isinstance(instance, WorkflowInstance):
        return read_instance(instance.pk, lock=True)
    _check_key(instance)
    postgresql = connection.vendor == "postgresql"
    return _read(
        "lock_instance_by_key" if postgresql else "read_instance_by_key", {"key": instance}
    )


def _read(name: str, values: dict[str, Any]) -> WorkflowInstance | None:
    with connection.cursor() as cursor:
        row = executor.execute(cursor, name, values).fetchone()
    if row is None:
        return None
    return _instance(row)


def _instance(row: Sequence[Any]) -> WorkflowInstance:
    fields = converted(WorkflowInstance, sql.INSTANCE_COLUMNS, row)
    return WorkflowInstance.from_db(connection.alias, _attnames(), fields)


def pk_of(instance: WorkflowInstance | str) -> int:
    """The primary key of an instance given as itself or by its key.

    Raises ``WorkflowInstance.DoesNotExist`` for an unknown key and
    :class:`WorkflowInputError` for a key that is not storable text or anything else.
    """
    if isinstance(instance, WorkflowInstance):
        return instance.pk
    _check_key(instance)
    try:
        return WorkflowInstance.objects.values_list("pk", flat=True).get(key=instance)
    except WorkflowInstance.DoesNotExist:
        raise missing(instance) from None


def missing(instance: WorkflowInstance | str) -> WorkflowInstance.DoesNotExist:
    """The error for an instance that does not exist (given by its key, or deleted)."""
    if isinstance(instance, WorkflowInstance):
        return WorkflowInstance.DoesNotExist(
            f"Workflow instance {instance.pk} ({instance.key!r}) no longer exists."
        )
    return WorkflowInstance.DoesNotExist(f"No workflow instance has the key {instance!r}.")


def _check_key(instance: object) -> None:
    """Refuse anything but an instance key of storable text."""
    if not isinstance(instance, str):
        raise WorkflowInputError(
            f"Expected a WorkflowInstance or an instance key, not {type(instance).__name__}."
        )
    storable.check_text(instance, what="The instance key")


def copy_onto(target: WorkflowInstance | str, source: WorkflowInstance) -> None:
    """Copy ``source``'s committed state onto the caller's object, so ``instance.status``
    is current after a verb (a key has no object to update)."""
    if isinstance(target, WorkflowInstance) and target is not source:
        for field in WorkflowInstance._meta.concrete_fields:
            setattr(target, field.attname, getattr(source, field.attname))
