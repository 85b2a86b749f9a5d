"""A django-q2 ORM broker that hands out due bells by priority, then earliest-due first, cheaply.

django-q2's ORM broker dequeues due rows without an ``ORDER BY``: under a backlog (more
bells due than workers can take) the database returns them in whatever order it finds
them, so an instance due long ago can wait behind ones due later. This broker orders by the
bell's priority (its instance's, in the column migration 0020 adds to django-q2's queue
table: a task of higher ``Task.priority`` starts first), then by the row's ``lock`` (a bell's
due time, see :mod:`django_workerflow.workers.bells`), then by id, served by the ``(key,
workerflow_priority, lock)`` index of that migration.

It claims and acknowledges bells with named statements (:mod:`django_workerflow.store.sql`) instead
of the ORM's query compiler, which cost more than the statements themselves: on PostgreSQL one
statement claims the earliest-due rows (skipping rows another cluster is claiming) without waiting
for its WAL flush (a claim lost in a server crash only hands its bells out again), on SQLite a read
(an empty queue's poll takes no write lock) then one claiming update.

It also keeps its connection between calls: django-q2's broker closes "old" connections on
every call, which with ``CONN_MAX_AGE = 0`` reopens the database three times per bell
(dequeue, claim, acknowledge). This one closes its connection only when it failed and is no
longer usable.

On PostgreSQL it does not poll: an empty claim answers when the queue's next bell comes
due, and the broker waits on its connection (``WORKERFLOW_BELL_LISTEN_DATABASE``'s if set)
for a bell notification
(:mod:`~django_workerflow.store.bell_channel`) until then, or until the safety-net poll
``WORKERFLOW_BELL_POLL_SECONDS`` (a lost notification costs at most that, plus up to a
second: a poll due just before a bell it knows of waits for that bell, so one claim serves
both; see :func:`~django_workerflow.store.bell_channel.wake_at`). On SQLite, or
where notifications do not arrive (another driver, a transaction-pooling proxy), it sleeps
django-q2's ``poll`` between claims, as django-q2 does.

No method lets a database error escape to django-q2, whose pusher sleeps 10 s and exits on
one, and whose monitor dies of one: a call that fails closes the broker's connections and
tries once more on a new one (an idle connection a restart or a pooler killed); if that fails
too, the database is away (:mod:`~django_workerflow.store.outage` logs it once per process).
A claim then returns nothing and waits :data:`RECONNECT_SECONDS`, an acknowledgement is kept
and sent again with the next one, an enqueue outside a transaction raises the error to its
caller.

Use it with ``Q_CLUSTER = {..., "orm": "default",
"broker_class": "django_workerflow.broker.DueFirstOrmBroker"}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from time import sleep, time
from typing import Any

from django.db import Error, connections
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ

from django_workerflow.conf import settings
from django_workerflow.store import bell_queue, outage
from django_workerflow.store.bell_channel import DUE_MARGIN, BellListener

QUEUE = OrmQ._meta.db_table
#: Seconds between claims while the database cannot be reached.
RECONNECT_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class _Idle:
    """The broker's next claim waits for the safety-net ``poll`` or the earliest bell known
    to be ``due`` (seconds since the epoch; see
    :func:`django_workerflow.store.bell_channel.wake_at`), which bell notifications on ``session``
    move earlier (the connection LISTENing then; after a reconnect the claim runs at once, as a
    notification may have been missed)."""

    session: Any
    poll: float
    due: float | None


def _in_claim_order(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A claimed row (id, payload, due, priority) in the statement's order: a claim's
    ``RETURNING`` does not keep its ``ORDER BY``."""
    return (row[3], row[2], row[0])


def _reset_if_broken(connection: Any) -> None:
    """Close ``connection`` if it failed and is no longer usable (a restart): the next
    statement reconnects. Otherwise forget the failure (Django would close it)."""
    if connection.connection is not None and connection.errors_occurred:
        if connection.get_autocommit() and not connection.is_usable():
            connection.close()
        else:
            connection.errors_occurred = False


def _close_connections() -> None:
    """Close the broker's connections (outside a transaction): the next call reconnects."""
    for alias in {Conf.ORM, settings.BELL_LISTEN_DATABASE or Conf.ORM}:
        connection = connections[alias]
        if not connection.in_atomic_block:
            try:
                connection.close()
            except Error:
                connection.connection = None  # already gone: forget it


class DueFirstOrmBroker(ORM):  # type: ignore[misc]  # django-q2 ships no types: ORM is Any
    """django-q2's ORM broker, dequeuing the earliest-due rows first."""

    # Class defaults: django-q2 pickles a broker into its processes by its list key only.
    _listener: BellListener | None = None
    _idle: _Idle | None = None
    #: Bells whose acknowledgement failed: deleted with the next acknowledgement.
    _unacknowledged: tuple[Any, ...] = ()

    def _failed(self) -> None:
        """A statement failed: forget the listening session and close the connections."""
        self._idle = None
        _close_connections()

    @staticmethod
    def get_connection(list_key: str | None = None) -> Any:
        _reset_if_broken(connections[Conf.ORM])
        return OrmQ.objects.using(Conf.ORM)

    def dequeue(self) -> list[tuple[int, Any]] | None:
        """Claim the earliest-due bells (None: none due, or the database is away)."""
        for attempt in (1, 2):
            try:
                taken = self._dequeue()
            except Error as error:
                self._failed()
                if attempt == 2:
                    outage.lost(Conf.ORM, error)
                    sleep(RECONNECT_SECONDS)
            else:
                outage.back()
                return taken
        return None

    def enqueue(self, task: Any) -> Any:
        """Queue a task; outside a transaction, on a new connection if the idle one is dead."""
        if connections[Conf.ORM].in_atomic_block:
            return super().enqueue(task)
        try:
            return super().enqueue(task)
        except Error:
            self._failed()
        try:
            return super().enqueue(task)
        except Error as error:
            self._failed()
            outage.lost(Conf.ORM, error)
            raise

    def _dequeue(self) -> list[tuple[int, Any]] | None:
        self.get_connection()
        connection = connections[Conf.ORM]
        if not bell_queue.notified(connection):
            return self._poll(connection)
        # LISTEN before the claim: a bell committed after the claim's snapshot notifies.
        listen_on = connections[settings.BELL_LISTEN_DATABASE or Conf.ORM]
        _reset_if_broken(listen_on)
        listen_on.ensure_connection()
        listener = self._listener = self._listener or BellListener()
        listening = listener.listen(listen_on)
        idle, self._idle = self._idle, None
        if listening and idle is not None and idle.session is listen_on.connection:
            listener.wait(listen_on, idle.poll, idle.due, self.list_key)
        if listening:
            listener.drain(listen_on)
        now = timezone.now()
        rows = bell_queue.claim_due(connection, QUEUE, self._values(now))
        claimed = sorted((row for row in rows if row[0] is not None), key=_in_claim_order)
        taken = [(pk, payload) for pk, payload, _due, _priority in claimed]
        next_due = next((due for pk, _payload, due, _priority in rows if pk is None), None)
        if listening:
            due = None if next_due is None else next_due.timestamp() + DUE_MARGIN
            self._idle = _Idle(listen_on.connection, time() + settings.BELL_POLL_SECONDS, due)
        elif not taken:
            sleep(Conf.POLL)  # an empty queue: spare the CPU, as django-q2 does
        return taken or None

    def _poll(self, connection: Any) -> list[tuple[int, Any]] | None:
        taken = bell_queue.read_then_claim(connection, QUEUE, self._values(timezone.now()))
        if not taken:
            sleep(Conf.POLL)  # an empty queue: spare the CPU, as django-q2 does
        return taken or None

    def _values(self, now: datetime) -> dict[str, Any]:
        adapt = connections[Conf.ORM].ops.adapt_datetimefield_value
        return {
            "key": self.list_key,
            "now": adapt(now),
            "until": adapt(now + timedelta(seconds=Conf.RETRY)),
            "limit": Conf.BULK,
        }

    def delete(self, task_id: Any) -> None:
        """Remove a bell: handled (acknowledged) or unreadable (failed). While the database
        is away the bell is kept and removed with the next call (if the process lives
        that long: else it is handed out again after django-q2's ``retry``, and its tick
        finds nothing to do)."""
        self._unacknowledged = (*self._unacknowledged, task_id)
        for attempt in (1, 2):
            try:
                self._delete_unacknowledged()
            except Error as error:
                self._failed()
                if attempt == 2:
                    outage.lost(Conf.ORM, error)
            else:
                outage.back()
                return

    def _delete_unacknowledged(self) -> None:
        self.get_connection()
        while self._unacknowledged:
            bell_queue.delete(connections[Conf.ORM], QUEUE, self._unacknowledged[0])
            self._unacknowledged = self._unacknowledged[1:]
