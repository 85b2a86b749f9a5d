"""A transaction in which the database refuses every write, and which is always rolled back.

Check replays run user code (``execute()``) against the production database; this is the
second of their two guards (the first: :mod:`.replay` never writes). PostgreSQL is told
``SET TRANSACTION READ ONLY`` (any write raises), SQLite ``PRAGMA query_only`` (the same, for
the connection, switched back on exit); and the transaction is rolled back whatever happens,
so nothing written through any other path outlives it either.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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
            if connection.vendor == "sqlite":
                with connection.cursor() as cursor:
                    cursor.execute("PRAGMA query_only = OFF")
            transaction.set_rollback(True, using=using)


@contextmanager
def savepoint_rolled_back(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """A savepoint always rolled back: a failed statement inside it (PostgreSQL aborts the
    transaction on one) does not poison the enclosing read-only transaction."""
    with transaction.atomic(using=using):
        try:
            yield
        finally:
            transaction.set_rollback(True, using=using)
