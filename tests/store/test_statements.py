"""The hot path's cost in SQL statements, counted exactly (issue 5's budget).

A run step costs one transaction: its success is recorded together with the start of the
next run step (issue 15's fused write; before it, a step cost two transactions, one to start
the attempt and one to record its outcome). On PostgreSQL that transaction is a single
statement; on SQLite a short IMMEDIATE transaction of three statements (the success, the
new step, both step events in one insert). Replaying recorded steps costs no statement at all.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

import django_workerflow as workerflow
from tests.support.statements import count_tick, label, statements_of_a_tick

pytestmark = pytest.mark.django_db


@pytest.fixture
def steps_workflow(define):
    def make(steps: int):
        def execute(self):
            for number in range(steps):
                self.run(f"step-{number}", lambda number=number: number)
            self.sleep("rest", 60)

        return define(execute)

    return make


def cost_per_step(steps_workflow, small: int = 10, large: int = 30) -> tuple[float, float]:
    """(statements, transactions) per run step, from the difference of two workflow sizes."""
    counters = []
    for steps in (small, large):
        instance = workerflow.start(steps_workflow(steps))
        counters.append(count_tick(instance.pk))
    statements = (len(counters[1].statements) - len(counters[0].statements)) / (large - small)
    transactions = (counters[1].transactions - counters[0].transactions) / (large - small)
    return statements, transactions


def test_run_step__costs_one_transaction_of_one_statement_on_postgresql(steps_workflow):
    statements, transactions = cost_per_step(steps_workflow)
    print(f"\n{connection.vendor}: {statements} statements, {transactions} transactions a step")
    # A lease renewal (every quarter lease) may add a fraction.
    assert transactions <= 1.05
    if connection.vendor == "postgresql":
        assert statements <= 1.05
    else:
        assert statements <= 3.05


def test_replay__of_recorded_steps_costs_no_statement(steps_workflow, workerflow_harness):
    costs = []
    for steps in (10, 30):
        instance = workerflow.start(steps_workflow(steps))
        workerflow_harness.drain()
        workerflow_harness.advance(61)
        instance.refresh_from_db()
        assert instance.status == "completed"
    for steps in (10, 30):
        # A fresh instance replaying `steps` recorded steps: wake it after it finished its
        # run steps and measure the replay tick.
        instance = workerflow.start(steps_workflow(steps))
        workerflow_harness.drain()
        workflow_instance = type(instance).objects.get(pk=instance.pk)
        type(instance).objects.filter(pk=instance.pk).update(alarm_at=workerflow_harness.now())
        costs.append(len(statements_of_a_tick(workflow_instance.pk)))
    assert costs[0] == costs[1], costs


def test_synchronous_commit__a_tick_inside_a_users_atomic_block_leaves_it_on(steps_workflow):
    if connection.vendor != "postgresql":
        pytest.skip("synchronous_commit is a PostgreSQL setting")
    instance = workerflow.start(steps_workflow(3))

    with transaction.atomic():
        counter = count_tick(instance.pk)
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone()[0] == "on"

    assert not any("no_flush" in statement for statement in counter.statements)


@pytest.mark.django_db(transaction=True)
def test_synchronous_commit__is_off_only_for_the_start_marker_in_autocommit(steps_workflow):
    if connection.vendor != "postgresql":
        pytest.skip("synchronous_commit is a PostgreSQL setting")
    instance = workerflow.start(steps_workflow(3))

    counter = count_tick(instance.pk)

    # The first step's start commits with the tick's claim (issue 39), every later start
    # carries the previous step's success: each commits synchronously. Only a start standing
    # alone (after another kind of write) skips its flush.
    executed = counter.statements
    assert sum("no_flush" in statement for statement in executed) == 0
    assert sum(label("succeed_and_start") in statement for statement in executed) == 2
    assert not any("succeed_and_start" in s and "no_flush" in s for s in counter.statements)
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
