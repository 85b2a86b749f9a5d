"""The transactions step writes run in, and the rows every kind of step write appends.

Two shapes: a *fenced* transaction (renew the lease first, which also locks the instance
row against a concurrent pause or cancel) for the rarer transitions, and a *hot* write for
the two writes every run step makes (start, success): on PostgreSQL one self-contained
statement, on SQLite a short ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from types import TracebackType
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from django_workerflow.exceptions import StepStateError
from django_workerflow.models import Step
from django_workerflow.models.fields import engine_datetime
from django_workerflow.store import executor, sql
from django_workerflow.store.attributes import PendingAttributes
from django_workerflow.store.lease import Lease
from django_workerflow.store.progress import PendingProgress
from django_workerflow.values.states import StepEventType


def adapt(value: datetime | None) -> Any:
    """A datetime as the connection's driver takes it for an engine column."""
    return engine_datetime(value, connection)


def execute_plain_at(cursor: Any, name: str, values: dict[str, Any], now: datetime) -> None:
    """Run the statement ``name`` unprepared (``prepare=False``) with ``values``
    and the time ``now``."""
    executor.execute(cursor, name, {"now": adapt(now), **values}, prepare=False)


@contextmanager
def fenced(lease: Lease, now: datetime, *, require_running: bool) -> Iterator[Any]:
    """A transaction that first renews the lease (locking the instance row)."""
    with transaction.atomic(), connection.cursor() as cursor:
        lease.fence(cursor, adapt, now, require_running=require_running)
        yield cursor


class WriteTransaction:
    """PostgreSQL: a cursor, whose one self-contained statement is its own transaction (or
    part of the caller's). SQLite: a short ``BEGIN IMMEDIATE`` transaction, or a savepoint
    of the caller's atomic block.

    Given ``values``, it is the hot write, the transaction of the two writes every run step
    makes (start, success): on SQLite it renews the lease first when that is due
    (``values["renew"]``; PostgreSQL's statements renew it themselves).

    A class rather than generator-based context managers: every run step enters one, and
    each generator layer costs about six Python calls more.
    """

    __slots__ = ("_atomic", "_begun", "_cursor", "_values")

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self._values = values
        self._atomic: Any = None
        self._cursor: Any = None
        self._begun = False

    def __enter__(self) -> Any:
        # The connection itself, not the ``connection`` proxy: each attribute read through
        # the proxy is a few Python calls, and every run step enters here.
        db = connections[DEFAULT_DB_ALIAS]
        if db.vendor == "postgresql":
            self._cursor = db.cursor()
            return self._cursor
        if db.in_atomic_block:
            # SQLite cannot open a transaction inside another (BEGIN IMMEDIATE fails there),
            # so inside a caller's atomic block, a django_db test's wrapping transaction among
            # them, the write is a savepoint of that transaction. Tests that must see the
            # production path run without a wrapping transaction (transactional_db).
            self._atomic = transaction.atomic()
            self._atomic.__enter__()
        try:
            # Inside the try: a cursor that cannot be opened still leaves the savepoint.
            self._cursor = db.cursor()
            if self._atomic is None:
                # Outside any atomic block no on-commit hook can be pending, so the
                # transaction is plain SQL: Django's savepoint and autocommit bookkeeping
                # cost a third of a step.
                self._cursor.execute("BEGIN IMMEDIATE")
                self._begun = True
            if self._values is not None and self._values["renew"]:
                executor.execute(self._cursor, "renew_lease", self._values)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self._cursor

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._begun:
                self._cursor.execute("ROLLBACK" if exc_type is not None else "COMMIT")
        finally:
            if self._cursor is not None:
                self._cursor.__exit__(exc_type, exc, tb)
            if self._atomic is not None:
                self._atomic.__exit__(exc_type, exc, tb)


def start_new_run_statement(renew: bool) -> str:
    """Which statement starts a new run step.

    PostgreSQL: the fence renews the lease or only checks it, and the start marker skips its
    WAL flush only in autocommit, where nothing else shares its transaction (a
    ``synchronous_commit`` set for the transaction would otherwise last until the caller's
    commit and weaken it).
    """
    if connection.vendor != "postgresql":
        return "start_new_run_sqlite"
    name = "start_new_run_renewing" if renew else "start_new_run_checked"
    return name if connection.in_atomic_block else f"{name}_no_flush"


def insert_event(
    cursor: Any,
    instance_pk: int,
    step_pk: int,
    now: datetime,
    event_type: str,
    **fields: Any,
) -> None:
    """Append one step event; ``fields`` are its optional columns."""
    values = {
        "instance": instance_pk,
        "step": step_pk,
        "type": event_type,
        "now": adapt(now),
        "attempt_number": fields.get("attempt_number"),
        "result": fields.get("result"),
        "error_name": fields.get("error_name") or "",
        "error_message": fields.get("error_message") or "",
        "next_attempt_at": adapt(fields.get("next_attempt_at")),
        "wake_at": adapt(fields.get("wake_at")),
        "event_name": fields.get("event_name") or "",
        "timeout_at": adapt(fields.get("timeout_at")),
        "payload": fields.get("payload"),
        "traceback": fields.get("traceback") or "",
    }
    executor.execute(cursor, "insert_step_event", values, prepare=False)


def satisfy_wait(
    cursor: Any,
    instance_pk: int,
    step_pk: int,
    event_pk: int,
    payload_json: str | None,
    now: datetime,
) -> None:
    """Mark a waiting wait step satisfied by an inbound event, and the event claimed by it."""
    values = sql.params(step=step_pk, event=event_pk, payload=payload_json, now=adapt(now))
    executor.execute(cursor, "satisfy_wait", values, prepare=False)
    executor.execute(cursor, "claim_event", values, prepare=False)
    insert_event(
        cursor, instance_pk, step_pk, now, StepEventType.WAIT_SATISFIED, payload=payload_json
    )


def explain_refusal(
    instance_pk: int,
    step_id: str,
    expected_state: str,
    expected_attempt: int | None,
    now: datetime,
) -> StepStateError:
    """Why a step transition matched no row (read after the fact, off the common path)."""
    row = (
        Step.objects.filter(instance_id=instance_pk, step_id=step_id)
        .values("state", "attempt_count", "next_attempt_at")
        .first()
    )
    if row is None:
        return StepStateError(f"Step '{step_id}' not found in this workflow instance.")
    if row["state"] != expected_state:
        return StepStateError(
            f"Step '{step_id}' is in the wrong state: Expected '{expected_state}' but got "
            f"{row['state']}."
        )
    if expected_attempt is not None and row["attempt_count"] != expected_attempt:
        return StepStateError(
            f"Unexpected attempt count for step '{step_id}': Expected {expected_attempt} "
            f"but got {row['attempt_count']}."
        )
    if row["next_attempt_at"] is not None and row["next_attempt_at"] > now:
        return StepStateError(
            f"Step '{step_id}' cannot start before its next attempt at "
            f"{row['next_attempt_at'].isoformat()}."
        )
    return StepStateError(f"Step '{step_id}' changed concurrently; try again.")


def keeps_claim_open() -> bool:
    """Whether a tick keeps its claim open until its first write (:class:`HeldClaim`): on
    PostgreSQL, outside any transaction. On SQLite the open claim would hold the
    database's one write lock through the replay: there the claim commits by itself."""
    return connection.vendor == "postgresql" and not connection.in_atomic_block


def write_pending(progress: PendingProgress, attributes: PendingAttributes) -> None:
    """Write the progress and attributes a tick holds and no step write took, in the
    caller's transaction, fenced by the tick's lease."""
    if progress.pending is not None:
        with connection.cursor() as cursor:
            progress.written(progress.write(cursor))
    if attributes.pending is not None:
        with connection.cursor() as cursor:
            attributes.written(attributes.write(cursor))


class ClaimUndone(Exception):
    """Rolls back a claim the tick refused after taking it (:meth:`HeldClaim.undo`)."""


class HeldClaim:
    """The tick's claim, left open until the tick's first write commits it (PostgreSQL, a
    tick outside any transaction): the claim and the first attempt's start, or whatever the
    tick writes first, are one commit. Entered at the claim; :meth:`commit` once that write
    (or the settle) is done, :meth:`close` when the tick ends either way (a rollback if it
    raised before committing).

    While it is open the instance row stays locked, as it is for the claim itself; a pass
    that reaches no write commits it before its settle, whose transaction locks the
    finish's waiters before the instance (the lock order, :mod:`.locks`).
    """

    __slots__ = ("_atomic",)

    def __init__(self) -> None:
        self._atomic: Any = transaction.atomic()
        self._atomic.__enter__()

    @property
    def open(self) -> bool:
        return self._atomic is not None

    def commit(self) -> None:
        """Commit the claim with what was written since (a no-op once committed)."""
        atomic, self._atomic = self._atomic, None
        if atomic is not None:
            atomic.__exit__(None, None, None)

    def undo(self) -> None:
        """Roll back what the claim wrote and hold a fresh transaction in its place (a
        claim taken in one statement that the tick then refuses)."""
        atomic, self._atomic = self._atomic, transaction.atomic()
        if atomic is not None:
            atomic.__exit__(ClaimUndone, ClaimUndone(), None)
        self._atomic.__enter__()

    def close(self, exc: BaseException | None) -> None:
        """End the transaction if still open: roll back what ``exc`` interrupted, else commit."""
        atomic, self._atomic = self._atomic, None
        if atomic is not None:
            atomic.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
