"""The bell channel: PostgreSQL notifications that a bell was queued.

Migrations 0014 and 0017 have every insert into django-q2's queue table notify
:data:`CHANNEL` at the inserting transaction's commit, with the rows' queue key and their
earliest due time (``"<key> <seconds since the epoch>"``), once per queue and transaction
unless a later insert of the transaction queues a bell due earlier still. A
:class:`BellListener` LISTENs on the broker's connection (again after a reconnect) and lets
the broker sleep until a bell of its queue is due instead of polling.

Notifications are only a prompt: the queue rows stay the truth, a notification can be lost
(the listening connection dropped, a proxy in between), so the broker still polls, slowly.
A transaction-pooling proxy (PgBouncer's ``pool_mode = transaction``) runs LISTEN on some
server connection and delivers nothing to ours: the listener notices that its own probe
never came back, logs it once, and the broker keeps polling as it did without notifications.

Needs psycopg 3.2 or later (``Connection.notifies(timeout=...)``); with another driver the
broker polls.
"""

from __future__ import annotations

import inspect
import logging
import os
from time import monotonic, time
from typing import Any

from django_workerflow.store import executor

logger = logging.getLogger(__name__)

#: The notification channel (frozen in migration 0014, which sends on it).
CHANNEL = "workerflow_bell"
#: Seconds the listener waits for its own probe notification after LISTEN.
PROBE_SECONDS = 2.0
#: Seconds past a bell's due time to wake for it: a float's rounding of the time must not
#: wake a broker a microsecond early, for a claim that finds nothing due yet.
DUE_MARGIN = 0.0005
#: Seconds a safety-net poll may wait for a bell known to come due just after it, so that
#: one claim serves both: a sweeper link queued a poll interval after the previous link's
#: claim comes due a few milliseconds after the poll, which found nothing and claimed twice.
FOLD_SECONDS = 1.0


def wake_at(poll: float, due: float | None) -> float:
    """When to claim next (seconds since the epoch), given the safety-net poll's time and
    the earliest bell known to be due (None: none known): the bell's due time if it comes
    before the poll or at most :data:`FOLD_SECONDS` after it, else the poll's."""
    if due is not None and due <= poll + FOLD_SECONDS:
        return due
    return poll


class BellListener:
    """LISTEN on one Django connection's current database session and wait for bells.

    One per broker (a pusher process). Not thread-safe: the pusher is one thread.
    """

    def __init__(self) -> None:
        self._session: Any = None  # the driver connection LISTEN ran on
        self._listening = False
        self._warned = False

    def listen(self, connection: Any) -> bool:
        """LISTEN on ``connection`` (a Django connection) unless its session already does;
        True if notifications reach it. Call before claiming, so a bell queued after the
        claim's snapshot is not missed."""
        session = connection.connection
        if session is self._session and session is not None:
            return self._listening
        self._session, self._listening = session, False
        if session is None or not self._can_listen(connection):
            return False
        probe = f"probe {os.getpid()} {id(session)}"
        with connection.cursor() as cursor:
            executor.execute(cursor, "listen_bells", text=f"LISTEN {CHANNEL}", prepare=False)
            notify = "SELECT pg_notify(%s, %s)"
            executor.execute(cursor, "probe_bells", [CHANNEL, probe], text=notify, prepare=False)
        self._listening = self._probe_returns(connection, probe)
        if not self._listening and not self._warned:
            self._warned = True
            logger.warning(
                "bell notifications do not reach database alias %r (its LISTEN got no "
                "notification back: is a transaction-pooling proxy such as PgBouncer between "
                "the workers and PostgreSQL?). The broker polls the queue instead. Name a direct "
                "or session-pooled connection in WORKERFLOW_BELL_LISTEN_DATABASE "
                '(docs/operations.md, "Wake-ups").',
                connection.alias,
            )
        return self._listening

    def drain(self, connection: Any) -> None:
        """Drop the notifications already received: the claim that follows covers them."""
        with connection.wrap_database_errors:
            for _notify in connection.connection.notifies(timeout=0.0):
                pass

    def wait(self, connection: Any, poll: float, due: float | None, key: str) -> None:
        """Wait until :func:`wake_at` (``poll``, ``due``: seconds since the epoch), the
        earliest due time of the bells of the queue ``key`` moving earlier with each
        notification."""
        with connection.wrap_database_errors:
            while (remaining := wake_at(poll, due) - time()) > 0:
                for notify in connection.connection.notifies(timeout=remaining):
                    queue, _, when = notify.payload.rpartition(" ")
                    if queue != key:
                        continue
                    notified = _seconds(when) + DUE_MARGIN
                    due = notified if due is None else min(due, notified)
                    break  # wait again, for the new remaining time

    @staticmethod
    def _can_listen(connection: Any) -> bool:
        # notifies(timeout=...) is psycopg 3.2's; autocommit, or notifications wait for the
        # end of a transaction the broker never ends.
        notifies = getattr(connection.connection, "notifies", None)
        return (
            connection.vendor == "postgresql"
            and notifies is not None
            and "timeout" in inspect.signature(notifies).parameters
            and connection.get_autocommit()
        )

    @staticmethod
    def _probe_returns(connection: Any, probe: str) -> bool:
        """Whether the notification ``probe`` arrives within :data:`PROBE_SECONDS`."""
        deadline = monotonic() + PROBE_SECONDS
        with connection.wrap_database_errors:
            while (remaining := deadline - monotonic()) > 0:
                for notify in connection.connection.notifies(timeout=remaining, stop_after=1):
                    if notify.payload == probe:
                        return True
        return False


def _seconds(due: str) -> float:
    """A notification's due time; one that does not name a time is due now."""
    try:
        return float(due)
    except ValueError:
        return 0.0
