"""The bell: tells a django-q2 worker when an instance's alarm comes due.

``WorkflowInstance.alarm_at`` is the truth; a bell only prompts a tick, and every tick
re-reads the instance under a lock, so a late, early, duplicate or stale bell is harmless.

With django-q2's ORM broker a bell is an ``OrmQ`` row whose ``lock`` is the due time: the
pusher never hands a row out before its lock, so the row is a precise delayed task, and it
is inserted in the same transaction as the state change (a rolled-back change rings
nothing). Bells further ahead than :data:`HORIZON` are not queued at all: the sweeper queues
them when they come near, which keeps the queue short however many instances sleep. Other
brokers cannot delay a task: due bells go out when the transaction commits and later ones
are rung by the sweeper once overdue.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.db import connections, transaction

from django_workerflow.models import WorkflowInstance
from django_workerflow.store import bell_queue
from django_workerflow.values.clock import in_project_time
from django_workerflow.values.clock import now as clock_now

#: Bells further ahead than this are left to the sweeper (it runs about once a minute).
HORIZON = timedelta(minutes=5)
#: The django-q2 task a bell runs.
TICK_TASK = "django_workerflow.tasks.tick"

_state = threading.local()


@contextmanager
def suppressed() -> Iterator[None]:
    """Ring no bells (the test harness drives ticks itself)."""
    previous = getattr(_state, "suppressed", False)
    _state.suppressed = True
    try:
        yield
    finally:
        _state.suppressed = previous


def is_suppressed() -> bool:
    return getattr(_state, "suppressed", False)


def arm(instance_pk: int, when: datetime) -> None:
    """Ring for ``instance_pk`` at ``when``; call inside the transaction that set the alarm."""
    if ring(instance_pk, when):
        WorkflowInstance.objects.note_bell(instance_pk, when)


def ring(instance_pk: int, when: datetime) -> bool:
    """Queue the bell of :func:`arm` without recording it on the instance: for a transition
    that writes the instance anyway and sets ``bell_at`` to ``when`` in the same update
    (one row version, not two) when this returns True."""
    if not _rings(when):
        return False
    return queue_task(
        TICK_TASK,
        instance_pk,
        when=when,
        name=f"workerflow tick {instance_pk}",
        instance=instance_pk,
    )


def ring_task(task: str, *args: Any, when: datetime, name: str) -> bool:
    """Queue the django-q2 ``task`` to run at ``when`` (precisely with the ORM broker;
    otherwise at once if due, else left to the sweeper); call inside the transaction that
    made it due. True if a bell was queued."""
    return _rings(when) and queue_task(task, *args, when=when, name=name)


def queue_task(
    task: str, *args: Any, when: datetime, name: str, instance: int | None = None
) -> bool:
    """The one place a bell is enqueued: with django-q2's ORM broker a row handed out at
    ``when`` (in the order of the priority of ``instance``, the id of the instance it rings
    for, if any), otherwise a task sent when the transaction commits if ``when`` is due (a
    later one is left to the sweeper). True if a bell was queued."""
    from django_q.conf import Conf  # django-q2 reads its settings when imported
    from django_q.tasks import async_task

    options: dict[str, Any] = {"task_name": name, "save": False}
    if Conf.ORM:
        options["broker"] = _delayed_orm_broker(when, instance)
        async_task(task, *args, **options)
    elif when <= clock_now():
        transaction.on_commit(lambda: async_task(task, *args, **options))
    else:
        return False
    return True


def _rings(when: datetime) -> bool:
    """Whether a bell for ``when`` is queued now: not under the harness, not without
    django-q2, not beyond the horizon (the sweeper queues those when they come near)."""
    return not is_suppressed() and apps.is_installed("django_q") and when <= clock_now() + HORIZON


def _delayed_orm_broker_class() -> type:
    # Late: django_q may not be an installed app, and its Conf reads Q_CLUSTER on import.
    from django_q.brokers.orm import ORM
    from django_q.conf import Conf
    from django_q.models import OrmQ

    class DelayedOrmBroker(ORM):  # type: ignore[misc]  # django-q2 ships no types: ORM is Any
        """The ORM broker, but the row's lock (when it may be handed out) is the due time,
        and its priority the instance's it rings for (see migration 0020).

        Relies on django-q2 1.11's ORM broker dequeuing only rows whose ``lock`` has passed
        (tests/workers/test_bells.py keeps a contract test on it).
        """

        def __init__(self, when: datetime, instance: int | None) -> None:
            super().__init__()
            self.when = when
            self.instance = instance

        def enqueue(self, task: str) -> int:
            connection = connections[Conf.ORM]
            values = {
                "key": self.list_key or Conf.CLUSTER_NAME,
                "payload": task,
                "due": connection.ops.adapt_datetimefield_value(in_project_time(self.when)),
                "instance": self.instance,
            }
            return bell_queue.insert(connection, OrmQ._meta.db_table, values)

    return DelayedOrmBroker


_broker_class: type | None = None


def _delayed_orm_broker(when: datetime, instance: int | None) -> Any:
    global _broker_class
    if _broker_class is None:
        _broker_class = _delayed_orm_broker_class()
    return _broker_class(when, instance)


def uses_delayed_bells() -> bool:
    """True when bells are precise (django-q2's ORM broker on our database)."""
    if not apps.is_installed("django_q"):
        return False
    # Late: django_q may not be an installed app, and its Conf reads Q_CLUSTER on import.
    from django_q.conf import Conf

    return bool(Conf.ORM) and Conf.ORM in connections
