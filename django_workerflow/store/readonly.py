"""A transaction in which the database refuses every write, and which is always rolled back.

Check replays run user code (``execute()``) against the production database; this is the
second of their two guards (the first: :mod:`django_workerflow.deploy.replay` never writes).
PostgreSQL is told ``SET TRANSACTION READ ONLY`` (any write raises), SQLite ``PRAGMA query_only``
(the same, for the connection, switched back on exit); and the transaction is rolled back whatever
happens, so nothing written through any other path outlives it either.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction


@contextmanager
def read_only_transaction(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Run the block in a read-only transaction (or savepoint) that is always rolled back."""
    connection = connections[using]
    with transaction.atomic(using=using):
        try:
            with connection.cursor() as cursor:
                if connection.vendor == "postgresql":
                    # Allowed at any point of a transaction (only the way back is refused);
                    # inside a savepoint, rolling the savepoint back restores read-write.
                    cursor.execute("SET TRANSACTION READ ONLY")
                elif connection.vendor == "sqlite":
                    cursor.execute("PRAGMA query_only = ON")
            yield
        finally:
            if connection.vendor == "sqlite" and connection.connection is not None:
                # On the driver's connection: Django refuses queries in a transaction marked
                # broken, and a connection left read-only would refuse every later write.
                connection.connection.execute("PRAGMA query_only = OFF")
            transaction.set_rollback(True, using=using)


@contextmanager
def savepoint_if_used(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Take a savepoint just before the block's first statement, if it runs one, and roll
    back to it at the end: a failed statement (PostgreSQL aborts the transaction on one)
    does not poison the enclosing read-only transaction, and a block that runs no statement
    (a replay of user code that reads nothing) costs no round trip."""
    connection = connections[using]
    state: dict[str, Any] = {"sid": None, "taking": False}

    def take_savepoint_first(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if state["sid"] is None and not state["taking"]:
            state["taking"] = True  # the SAVEPOINT statement passes through here too
            try:
                state["sid"] = _create_savepoint(using)
            finally:
                state["taking"] = False
        return execute(sql, params, many, context)

    try:
        with connection.execute_wrapper(take_savepoint_first):
            yield
    finally:
        if state["sid"] is not None:
            # Django marked the transaction for rollback if a statement failed; rolling back
            # to the savepoint taken before any statement of the block makes it good again
            # (what Atomic.__exit__ does for a savepoint).
            transaction.set_rollback(False, using=using)
            transaction.savepoint_rollback(state["sid"], using=using)
            transaction.savepoint_commit(state["sid"], using=using)


def _create_savepoint(using: str) -> str:
    # Django 6.1 renamed savepoint() to savepoint_create() and deprecates the old name.
    create = getattr(transaction, "savepoint_create", None) or transaction.savepoint
    return str(create(using=using))
