"""The tick's claim reads the one row it claims, however many instances are due (PostgreSQL).

A queue's table is mostly finished instances when a backlog arrives, and autovacuum's
``ANALYZE`` runs behind it: the planner then believes almost nothing is due. Measured in
``make bench`` (2,000 tasks drained, issue 39): a claim whose lease update was joined to
its locked row only through the CTE was planned as a scan of every due instance, filtered
by id, 2.6 ms a claim and growing with the backlog. The statement names the id itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance, WorkflowStatus
from django_workerflow.runtime.tick import tick
from django_workerflow.values.states import TickEnding

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="the plan is PostgreSQL's (WORKERFLOW_DB=postgres)",
    ),
    pytest.mark.django_db(transaction=True),
]

INSTANCE_TABLE = WorkflowInstance._meta.db_table
BACKLOG = 300


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan tree."""
    return [plan, *(node for child in plan.get("Plans", ()) for node in _nodes(child))]


def _claim_plans(plans: list[dict[str, Any]]):
    """An execute wrapper that runs ``EXPLAIN ANALYZE`` of each claim first and undoes it."""

    def explain(execute, sql, params, many, context):
        if sql.lstrip().startswith("/* workerflow_claim_instance */"):
            cursor = context["cursor"]
            cursor.execute("SAVEPOINT claim_plan")
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            (document,) = cursor.fetchone()
            parsed = json.loads(document) if isinstance(document, str) else document
            plans.append(parsed[0]["Plan"])
            cursor.execute("ROLLBACK TO SAVEPOINT claim_plan")
        return execute(sql, params, many, context)

    return explain


def test_claim__a_backlog_the_statistics_do_not_know__reads_only_its_row(define):
    definition = define(lambda self: self.run("a", lambda: 1))
    workerflow.start_many(definition, [(f"done-{index}", None) for index in range(BACKLOG)])
    WorkflowInstance.objects.update(status=WorkflowStatus.COMPLETED, alarm_at=None)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {INSTANCE_TABLE}")  # statistics: nothing is due
    backlog = workerflow.start_many(
        definition, [(f"due-{index}", None) for index in range(BACKLOG)]
    )
    plans: list[dict[str, Any]] = []

    with connection.execute_wrapper(_claim_plans(plans)):
        assert tick(backlog[0].pk).outcome == TickEnding.COMPLETED

    assert plans, "the tick ran no one-statement claim"
    scans = [node for node in _nodes(plans[0]) if node.get("Relation Name") == INSTANCE_TABLE]
    assert scans, "the plan reads no instance row"
    read = {node.get("Alias", INSTANCE_TABLE): node["Actual Rows"] for node in scans}
    assert max(read.values()) <= 1, f"the claim read {read} instance rows of {BACKLOG} due"
