"""Bells written as rows by the engine's own statements, for starts in bulk.

``bells.arm`` rings one instance through django-q2's ``async_task``; a start writes its
bell in the same statement as the instance row, so the ``OrmQ`` row is built here as
django-q2's ``async_task`` builds it: a signed package of a tick task that carries only the
instance's id (never user data), whose ``lock`` is the due time.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import connection
from django.utils import timezone

from django_workerflow.values.clock import in_project_time
from django_workerflow.workers import bells


def direct_orm_bells() -> bool:
    """True when a start may write its bell itself: django-q2's ORM broker on the default
    database, bells not suppressed, not in django-q2's synchronous mode."""
    if bells.is_suppressed() or not apps.is_installed("django_q"):
        return False
    # Late: django_q may not be an installed app, and its Conf reads Q_CLUSTER on import.
    from django_q.conf import Conf

    return Conf.ORM == "default" and not Conf.SYNC


def queue_table() -> str:
    # Late: django_q may not be an installed app, and its Conf reads Q_CLUSTER on import.
    from django_q.models import OrmQ

    table: str = OrmQ._meta.db_table  # django-q2 ships no types
    return table


def list_key() -> str:
    """The queue django-q2's ORM broker reads (its default list key, as ``alarms`` uses).

    Not read from a broker instance: creating one closes the connection when it is idle in
    Django's eyes, as it is inside the engine's own ``BEGIN IMMEDIATE`` transaction."""
    # Late: django_q may not be an installed app, and its Conf reads Q_CLUSTER on import.
    from django_q.conf import Conf

    name: str = Conf.CLUSTER_NAME  # django-q2 ships no types
    return name


def payload(instance_pk: int) -> str:
    """The signed django-q2 package of a tick task for the instance ``instance_pk``."""
    # Late: django_q may not be an installed app, and its Conf reads Q_CLUSTER on import.
    from django_q.conf import Conf
    from django_q.signals import pre_enqueue
    from django_q.signing import SignedPackage

    task: dict[str, Any] = {
        # django-q2's humanhash.uuid()[1]; its other half, a human-readable name built at a
        # fifth of this function's cost, names only tasks without a name of their own.
        "id": uuid.uuid4().hex,
        "name": f"workerflow tick {instance_pk}",
        "func": bells.TICK_TASK,
        "args": (instance_pk,),
        "save": False,
    }
    if Conf.CACHED:
        task["cached"] = Conf.CACHED
    if Conf.ACK_FAILURES:
        task["ack_failure"] = Conf.ACK_FAILURES
    task["kwargs"] = {}
    task["started"] = timezone.now()
    pre_enqueue.send(sender="django_q", task=task)
    package: str = SignedPackage.dumps(task)  # django-q2 ships no types
    return package


def due(when: datetime) -> Any:
    """A due time as the connection's driver takes it for django-q2's table, whose times
    are Django's: naive in ``TIME_ZONE`` when ``USE_TZ`` is False."""
    return connection.ops.adapt_datetimefield_value(in_project_time(when))
