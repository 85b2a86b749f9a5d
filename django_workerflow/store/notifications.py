"""Notifications: a caller of ``wait_result`` or ``wait_progress`` hears the instance's
channel instead of polling, where the database notifies (PostgreSQL's ``LISTEN``, on the
caller's own connection). Elsewhere :func:`available` says no and the caller polls.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

from django_workerflow.store import executor, sql


def available() -> bool:
    """Whether the connection hears notifications (PostgreSQL, with psycopg 3)."""
    return connection.vendor == "postgresql" and hasattr(connection.connection, "notifies")


@contextmanager
def listening(channels: list[str]) -> Iterator[None]:
    """Hear ``channels`` (names this engine made) until the block ends (:func:`available`
    only). A change committed after the block starts is notified."""
    with connection.cursor() as cursor:
        for name in channels:
            executor.execute(cursor, "listen", text=sql.listen_statement(name), prepare=False)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for name in channels:
                text = sql.unlisten_statement(name)
                executor.execute(cursor, "unlisten", text=text, prepare=False)


def wait(seconds: float) -> None:
    """Wait up to ``seconds`` for one notification of a channel heard (:func:`listening`)."""
    for _ in connection.connection.notifies(timeout=seconds, stop_after=1):
        break
