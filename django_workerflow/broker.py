"""A django-q2 ORM broker that hands out due bells earliest-due first.

django-q2's ORM broker dequeues due rows without an ``ORDER BY``: under a backlog (more
bells due than workers can take) the database returns them in whatever order it finds
them, so an instance due long ago can wait behind ones due later. This broker orders by the
row's ``lock`` (a bell's due time, see :mod:`django_workerflow.alarms`), then by id, served
by the ``(key, lock)`` index our migration 0006 adds to django-q2's queue table.

It also keeps its connection between calls: django-q2's broker closes "old" connections on
every call, which with ``CONN_MAX_AGE = 0`` (SQLite's usual setting) reopens the database
three times per bell (dequeue, claim, acknowledge). This one closes its connection only when
it failed and is no longer usable.

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


class DueFirstOrmBroker(ORM):
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
        due = list(
            self.get_connection()
            .filter(key=self.list_key, lock__lt=timezone.now())
            .order_by("lock", "id")
            .values_list("id", "lock", "payload")[: Conf.BULK]
        )
        if not due:
            sleep(Conf.POLL)  # an empty queue: spare the CPU, as django-q2 does
            return None
        taken = []
        for pk, lock, payload in due:
            # Claim it as django-q2 does: another cluster may have been faster.
            claimed = (
                self.get_connection()
                .filter(id=pk, lock=lock)
                .update(lock=timezone.now() + timedelta(seconds=Conf.RETRY))
            )
            if claimed:
                taken.append((pk, payload))
        return taken
