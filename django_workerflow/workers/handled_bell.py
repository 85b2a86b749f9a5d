"""The bell a django-q2 worker is handling: acknowledged in the commit of the tick it rang.

django-q2 acknowledges a task from its monitor process once the worker reports it done: for
a bell, one more ``DELETE`` in a transaction of its own after the tick's last commit. When the
queue is the ORM broker's table on the engine's database, the tick that finishes its instance
deletes its bell in its settle's transaction instead (on PostgreSQL inside the settle's first
statement, :func:`~django_workerflow.runtime.finishing.look_around`), and, once that commits,
takes the acknowledgement id off the task so the monitor sends nothing. A tick that does not
finish (it suspends, yields, fails to settle) leaves its bell to the monitor, as before: the
monitor acknowledges it after the task, or, if the task failed, the bell is handed out again
after django-q2's ``retry``.

The worker announces the task it is about to run with django-q2's ``pre_execute`` and that it
is done with ``post_execute_in_worker`` (connected in :mod:`django_workerflow.apps`); the task
dict the worker holds is the one it then puts on the result queue, so a change to it reaches
the monitor.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.apps import apps
from django.utils.module_loading import import_string

from django_workerflow.workers import bell_rows, bells

#: The task dict of the tick this worker process runs now (None between tasks).
_handling: dict[str, Any] | None = None


def handling(sender: Any, func: Any = None, task: dict[str, Any] | None = None, **_: Any) -> None:
    """django-q2's ``pre_execute``: remember the task if it is a tick whose bell a settle may
    acknowledge (a row of the ORM broker's queue on the engine's database)."""
    global _handling
    _handling = None
    if task is None or task.get("func") != bells.TICK_TASK or not task.get("ack_id"):
        return
    if _orm_queue_here():
        _handling = task


def handled(sender: Any, **_: Any) -> None:
    """django-q2's ``post_execute_in_worker``: the task is done, forget it."""
    global _handling
    _handling = None


def bell_of(instance_pk: int) -> int | None:
    """The id of the bell whose tick of ``instance_pk`` this process runs now, if its settle
    may delete it (None: none, or the monitor acknowledges it)."""
    task = _handling
    if task is None or tuple(task.get("args", ())) != (instance_pk,):
        return None
    ack_id = task.get("ack_id")
    return ack_id if isinstance(ack_id, int) else None


def acknowledged(bell: int) -> None:
    """The settle that deleted ``bell`` committed: the monitor has nothing left to send."""
    task = _handling
    if task is not None and task.get("ack_id") == bell:
        task["ack_id"] = None


def _orm_queue_here() -> bool:
    """True when bells are rows of the ORM broker's queue on the engine's database, so a
    settle can delete its bell in its own transaction."""
    return apps.is_installed("django_q") and bell_rows.direct_orm_bells() and _orm_broker()


@cache
def _orm_broker() -> bool:
    """True when django-q2's broker is its ORM broker (ours derives from it)."""
    # Late: django_q's Conf reads Q_CLUSTER on import.
    from django_q.brokers.orm import ORM
    from django_q.conf import Conf

    if not Conf.BROKER_CLASS:
        return True
    broker = import_string(Conf.BROKER_CLASS)
    return isinstance(broker, type) and issubclass(broker, ORM)
