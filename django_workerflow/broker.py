"""A django-q2 ORM broker that hands out due bells earliest-due first, cheaply.

django-q2's ORM broker dequeues due rows without an ``ORDER BY``: under a backlog (more
bells due than workers can take) the database returns them in whatever order it finds
them, so an instance due long ago can wait behind ones due later. This broker orders by the
row's ``lock`` (a bell's due time, see :mod:`django_workerflow.workers.bells`), then by id, served
by the ``(key, lock)`` index our migration 0006 adds to django-q2's queue table.

It claims and acknowledges bells with named statements (:mod:`.sql`) instead of the ORM's
query compiler, which cost more than the statements themselves: on PostgreSQL one
statement claims the earliest-due rows (skipping rows another cluster is claiming), on
SQLite a read (an empty queue's poll takes no write lock) then one claiming update.

It also keeps its connection between calls: django-q2's broker closes "old" connections on
every call, which with ``CONN_MAX_AGE = 0`` reopens the database three times per bell
(dequeue, claim, acknowledge). This one closes its connection only when it failed and is no
longer usable.

Use it with ``Q_CLUSTER = {..., "orm": "default",
"broker_class": "django_workerflow.broker.DueFirstOrmBroker"}``.
"""

from __future__ import annotations

from datetime import timedelta
from time import sleep
from typing import Any

from django.db import connections
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ

from django_workerflow.store import sql

QUEUE = OrmQ._meta.db_table


class DueFirstOrmBroker(ORM):  # type: ignore[misc]  # django-q2 ships no types: ORM is Any
    """django-q2's ORM broker, dequeuing the earliest-due rows first."""

    @staticmethod
    def get_connection(list_key: str | None = None) -> Any:
        connection = connections[Conf.ORM]
        if connection.connection is not None and connection.errors_occurred:
            if connection.get_autocommit() and not connection.is_usable():
                connection.close()  # a stale connection (a restart): reconnect
            else:
                connection.errors_occurred = False
        return OrmQ.objects.using(Conf.ORM)

    def dequeue(self) -> list[tuple[int, Any]] | None:
        self.get_connection()
        connection = connections[Conf.ORM]
        now = timezone.now()
        adapt = connection.ops.adapt_datetimefield_value
        values = {
            "key": self.list_key,
            "now": adapt(now),
            "until": adapt(now + timedelta(seconds=Conf.RETRY)),
            "limit": Conf.BULK,
        }
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(sql.queue_statement("claim_due_bells", QUEUE), values)
                claimed = sorted(cursor.fetchall(), key=lambda row: (row[2], row[0]))
                taken = [(pk, payload) for pk, payload, _due in claimed]
            else:
                taken = self._read_then_claim(cursor, values)
        if not taken:
            sleep(Conf.POLL)  # an empty queue: spare the CPU, as django-q2 does
            return None
        return taken

    @staticmethod
    def _read_then_claim(cursor: Any, values: dict[str, Any]) -> list[tuple[int, Any]]:
        cursor.execute(sql.queue_statement("due_bells", QUEUE), values)
        due = cursor.fetchall()
        if not due:
            return []
        ids = {f"id_{index}": pk for index, (pk, _payload) in enumerate(due)}
        cursor.execute(sql.queue_statement("claim_bells", QUEUE, len(due)), {**values, **ids})
        # Another cluster may have been faster on some: keep the ones this update claimed.
        claimed = {row[0] for row in cursor.fetchall()}
        return [(pk, payload) for pk, payload in due if pk in claimed]

    def delete(self, task_id: Any) -> None:
        """Remove a bell: handled (acknowledged) or unreadable (failed)."""
        self.get_connection()
        with connections[Conf.ORM].cursor() as cursor:
            cursor.execute(sql.queue_statement("delete_bell", QUEUE), {"id": task_id})
