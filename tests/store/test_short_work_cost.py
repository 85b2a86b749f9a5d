"""What short work costs, from its bell to FINISHED (issue 39): the bell claimed by the
broker, the tick in the worker, the acknowledgement django-q2's monitor would send, counted
on one connection that commits, as django-q2's processes run them.

PostgreSQL: 5 statements in 3 transactions at most for a one-step task or workflow (it was
12 in 6; 13 in 7 with the enqueue). The figures are asserted exactly, so a statement that
comes back fails here; docs/scaling.md ("What a one-step task costs") lists each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest
from django.db import connection
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signals import post_execute_in_worker, pre_execute
from django_q.signing import SignedPackage

import django_workerflow as workerflow
from django_workerflow import tasks as bell_tasks
from django_workerflow.broker import DueFirstOrmBroker
from django_workerflow.models import WorkflowInstance
from django_workerflow.store import instance_ids
from tests.clusterapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

# (statements, transactions) from the bell's claim to FINISHED, by database.
EXPECTED = {"postgresql": (5, 3), "sqlite": (12, 5)}


@dataclass
class Counter:
    """Statements (transaction control left out) and transactions, as the server sees them:
    each statement run in autocommit, each committed ``atomic()`` block that ran one, each
    ``BEGIN`` ... ``COMMIT`` the engine sends itself (SQLite's hot writes)."""

    statements: list[str] = field(default_factory=list)
    transactions: int = 0
    _raw_open: bool = False
    _atomic_ran: bool = False

    def __call__(self, execute, sql, params, many, context):
        keyword = sql.lstrip().split(None, 1)[0].upper()
        automatic = context["connection"].get_autocommit()
        if keyword == "BEGIN":
            # Django's own BEGIN (SQLite) runs while autocommit is still on: the next
            # statement, run with it off, tells the two apart.
            self._raw_open = automatic
        elif keyword in ("COMMIT", "ROLLBACK"):
            if self._raw_open:
                self.transactions += 1
            self._raw_open = False
        elif keyword not in ("SAVEPOINT", "RELEASE"):
            self.statements.append(sql)
            if not automatic:
                self._raw_open = False
                self._atomic_ran = True
            elif not self._raw_open:
                self.transactions += 1
        return execute(sql, params, many, context)

    def ended(self) -> None:
        """Django committed or rolled back an ``atomic()`` block."""
        if self._atomic_ran:
            self.transactions += 1
        self._atomic_ran = False


def counted(run: Callable[[], Any]) -> tuple[Counter, Any]:
    counter = Counter()
    commit, rollback = connection.commit, connection.rollback

    def committing() -> None:
        commit()
        counter.ended()

    def rolling_back() -> None:
        rollback()
        counter.ended()

    with (
        mock.patch.object(connection, "commit", committing),
        mock.patch.object(connection, "rollback", rolling_back),
        connection.execute_wrapper(counter),
    ):
        value = run()
    return counter, value


#: One broker for the test's bells, as the pusher keeps one (its LISTEN is sent once).
BROKER: dict[str, DueFirstOrmBroker] = {}


def bell_to_finished() -> tuple[int, int | None]:
    """What django-q2's processes do with one due bell: the pusher's claim, the worker's
    tick between its signals, the monitor's acknowledgement if the task still has one.
    Returns the bell and the one the monitor acknowledged (None: the settle did)."""
    broker = BROKER.setdefault(connection.vendor, DueFirstOrmBroker(list_key=Conf.CLUSTER_NAME))
    [(ack_id, payload)] = broker.dequeue() or []
    task = SignedPackage.loads(payload)
    task["ack_id"] = ack_id
    pre_execute.send(sender="django_q", func=task["func"], task=task)
    bell_tasks.tick(*task["args"])
    post_execute_in_worker.send(sender="django_q", func=task["func"], task=task)
    acknowledging = task.pop("ack_id", None)
    if acknowledging:
        broker.acknowledge(acknowledging)
    return ack_id, acknowledging or None


def warm_up(start: Callable[[], Any]) -> None:
    """The first start draws a block of ids, the first tick prepares this connection's
    named statements: the counted ones do neither."""
    instance_ids.id_block.discard()
    start()
    bell_to_finished()


@pytest.fixture
def one_step(define):
    return define(lambda self: self.run("attempt-1", lambda: {"value": None}))


def test_one_step_workflow__bell_to_finished_in_the_fewest_statements(one_step):
    warm_up(lambda: workerflow.start(one_step))
    instance = workerflow.start(one_step)

    counter, (bell, by_monitor) = counted(bell_to_finished)

    assert not OrmQ.objects.filter(pk=bell).exists()
    instance.refresh_from_db()
    assert instance.status == "completed"
    assert by_monitor is None  # the settle acknowledged the bell: the monitor sends nothing
    figures = (len(counter.statements), counter.transactions)
    print(f"\n[{connection.vendor}] bell to completed: {figures[0]} statements, {figures[1]} tx")
    assert figures == EXPECTED[connection.vendor], counter.statements


def test_one_step_task__costs_what_the_workflow_costs(one_step):
    warm_up(tasks.nothing.enqueue)
    result = tasks.nothing.enqueue()

    counter, _ = counted(bell_to_finished)

    assert WorkflowInstance.objects.get(key=result.id).status == "completed"
    assert (len(counter.statements), counter.transactions) == EXPECTED[connection.vendor]


def test_a_tick_that_does_not_finish__leaves_its_bell_to_the_monitor(define):
    sleeper = define(lambda self: self.sleep("nap", 3600))
    warm_up(lambda: workerflow.start(sleeper))
    workerflow.start(sleeper)

    bell, by_monitor = bell_to_finished()

    assert by_monitor == bell
    assert not OrmQ.objects.filter(pk=bell).exists()
