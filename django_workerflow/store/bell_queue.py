"""The bell queue: django-q2's queue table, its rows claimed, inserted and deleted by the
named queue statements of :mod:`.sql`, both databases side by side.

On PostgreSQL one statement claims the due rows (skipping rows another cluster is claiming)
and answers when the next one comes due, and a bell's insert notifies the listening broker
(:mod:`.bell_channel`); on SQLite a read (an empty queue's poll takes no write lock) and one
claiming update, and nothing notifies.
"""

from __future__ import annotations

from typing import Any

from django_workerflow.store import executor, sql

#: A claimed bell: its row id and payload.
Bell = tuple[int, Any]


def notified(connection: Any) -> bool:
    """Whether this database claims in one statement that says when the next bell comes
    due, and notifies new bells (PostgreSQL): else the broker polls."""
    return bool(connection.vendor == "postgresql")


def claim_due(connection: Any, table: str, values: dict[str, Any]) -> list[tuple[Any, ...]]:
    """PostgreSQL: claim the due bells of ``table`` (:func:`notified`); the rows (id,
    payload, due, priority), and one (NULL, NULL, next due, NULL). Without its WAL flush in
    autocommit (the broker's own loop), not inside a caller's transaction, whose commit the
    setting would otherwise weaken."""
    name = "claim_due_bells" if connection.in_atomic_block else "claim_due_bells_no_flush"
    text = sql.queue_statement(name, table)
    with connection.cursor() as cursor:
        rows: list[tuple[Any, ...]] = executor.execute(
            cursor, name, values, text=text, prepare=False
        ).fetchall()
    return rows


def read_then_claim(connection: Any, table: str, values: dict[str, Any]) -> list[Bell]:
    """SQLite: read the due bells of ``table``, then claim them; those this claim took
    (another cluster may have been faster on some)."""
    with connection.cursor() as cursor:
        text = sql.queue_statement("due_bells", table)
        due = executor.execute(cursor, "due_bells", values, text=text, prepare=False).fetchall()
        if not due:
            return []
        ids = {f"id_{index}": pk for index, (pk, _payload) in enumerate(due)}
        text = sql.queue_statement("claim_bells", table, len(due))
        claimed = {
            row[0]
            for row in executor.execute(
                cursor, "claim_bells", {**values, **ids}, text=text, prepare=False
            ).fetchall()
        }
    return [(pk, payload) for pk, payload in due if pk in claimed]


def insert(connection: Any, table: str, values: dict[str, Any]) -> int:
    """Queue one bell in ``table``; its row id. With an ``instance`` it has that instance's
    priority, else it rings for no instance (housekeeping, ahead of any backlog)."""
    name = "insert_bell" if values["instance"] is None else "insert_instance_bell"
    text = sql.queue_statement(name, table)
    with connection.cursor() as cursor:
        pk: int = executor.execute(cursor, name, values, text=text, prepare=False).fetchone()[0]
    return pk


def delete(connection: Any, table: str, pk: Any) -> None:
    """Delete one bell of ``table``: handled (acknowledged) or unreadable (failed)."""
    text = sql.queue_statement("delete_bell", table)
    with connection.cursor() as cursor:
        executor.execute(cursor, "delete_bell", {"id": pk}, text=text, prepare=False)
