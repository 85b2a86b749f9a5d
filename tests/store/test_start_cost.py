"""start() of one new instance: at most three statements, the bell included, and one commit
(issue 15). On PostgreSQL: one statement in autocommit, its id (which the bell names) taken
from the block this process drew ahead (tests/store/test_start_ids.py)."""

from __future__ import annotations

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance
from django_workerflow.store import instance_ids
from django_workerflow.workers import bells
from tests.support.statements import TRANSACTION_CONTROL, label, prepared_on_server

pytestmark = pytest.mark.django_db(transaction=True)


def test_start__of_a_new_instance_costs_at_most_three_statements_and_one_commit(define):
    workflow = define(lambda self: None)
    instance_ids.id_block.discard()
    workerflow.start(workflow)  # draws a block of ids: the next start takes one of them
    executed: list[str] = []

    def record(execute, sql, params, many, context):
        executed.append(sql.strip())
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        instance = workerflow.start(workflow, key="cheap", input={"n": 1})

    control = [s for s in executed if s.upper().startswith(TRANSACTION_CONTROL)]
    statements = [s for s in executed if s not in control]
    assert len(statements) <= 3, statements
    if connection.vendor == "postgresql":
        # Autocommit: instance, event and bell in one statement, its own transaction and the
        # only commit; prepared by the first start on this connection (issue 24).
        assert control == []
        assert [s.startswith(label("start_one")) for s in statements] == [True]
        assert any(sql.startswith(label("start_one")) for sql in prepared_on_server())
    else:
        assert control == ["BEGIN IMMEDIATE", "COMMIT"]
    stored = WorkflowInstance.objects.get(pk=instance.pk)
    assert (stored.key, stored.input, stored.status) == ("cheap", {"n": 1}, "pending")
    if bells.uses_delayed_bells():
        from django_q.models import OrmQ
        from django_q.signing import SignedPackage

        queued = [
            SignedPackage.loads(p)["args"] for p in OrmQ.objects.values_list("payload", flat=True)
        ]
        assert (instance.pk,) in [tuple(args) for args in queued]


def test_start__of_an_existing_key_returns_it_without_writing(define):
    workflow = define(lambda self: None)
    first = workerflow.start(workflow, key="again", input=1)

    second = workerflow.start(workflow, key="again", input=2)

    assert (second.pk, second.input) == (first.pk, 1)
    assert WorkflowInstance.objects.count() == 1


@pytest.mark.skipif(
    "connection.vendor != 'postgresql'", reason="PostgreSQL prepares the start statement"
)
def test_start__is_prepared_once_per_connection_and_sent_whole_when_preparing_is_off(
    define, settings
):
    workflow = define(lambda self: None)
    executed: list[str] = []

    def record(execute, sql, params, many, context):
        executed.append(sql)
        return execute(sql, params, many, context)

    connection.close()  # a new session: nothing prepared on it yet
    with connection.execute_wrapper(record):
        workerflow.start(workflow, key="first")
        workerflow.start(workflow, key="second")
        prepared = prepared_on_server()
        settings.WORKERFLOW_PREPARED_STATEMENTS = False
        workerflow.start(workflow, key="third")

    # The first start draws a block of ids; each start sends the one statement, the first
    # two prepared (one preparation, run twice), the third as it is, its parameters in it.
    starts = [sql for sql in executed if not sql.startswith("SELECT")]
    assert [sql.startswith(label("start_one")) for sql in starts] == [True, True, False]
    assert starts[2].startswith("WITH new AS (INSERT INTO")
    assert [runs for sql, runs in prepared.items() if sql.startswith(label("start_one"))] == [2]
    assert prepared_on_server() == prepared  # nothing prepared, nor run prepared, when off
    assert set(WorkflowInstance.objects.values_list("key", flat=True)) == {
        "first",
        "second",
        "third",
    }


def test_start__writes_no_entry_to_the_indexes_of_forks_children_or_finished_instances():
    with connection.cursor() as cursor:
        indexes = connection.introspection.get_constraints(cursor, WorkflowInstance._meta.db_table)
    # Partial (issue 24): only forks, children and finished instances are in them.
    partial = {"workerflow_forked_from", "workerflow_parent", "workerflow_status_finished"}
    assert partial <= set(indexes)
    for name in partial:
        assert not indexes[name]["unique"]
    # The key keeps its unique index and, on PostgreSQL, loses the pattern index Django adds.
    on_key = [index for index in indexes.values() if index["columns"] == ["key"]]
    assert [index["unique"] for index in on_key] == [True]
