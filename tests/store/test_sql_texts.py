"""Every named statement's full text, for each database that runs it, checked in under
``tests/sql/``.

The engine composes its statements from fragments (``store/sql.py``: the fence, the step
event, the fused success), so no file shows what reaches the server. These files do, and
this test fails when a statement changes without them: a review diff then shows the real
SQL. A named statement is checked in under ``postgresql/`` and ``sqlite/`` only for the
databases its declaration (``_DIALECTS`` in ``store/sql.py``) names. After changing a
statement, or its declaration, write them anew and read the diff:

    WORKERFLOW_WRITE_SQL=1 pytest tests/store/test_sql_texts.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from django_workerflow.models import WorkflowInstance
from django_workerflow.store import instance_writes, sql

HOME = Path(__file__).resolve().parents[1] / "sql"
VENDORS = ("postgresql", "sqlite")
QUEUE = "django_q_ormq"


def texts() -> dict[str, str]:
    """Every statement by file name (``<vendor>/<name>.sql``)."""
    found: dict[str, str] = {}
    for vendor in VENDORS:
        for name in sorted(sql._STATEMENTS):  # noqa: SLF001 - the checked-in texts cover every named statement
            if sql.runs_on(name, vendor):
                found[f"{vendor}/{name}.sql"] = sql.statement(vendor, name)
    for name in sorted(sql._QUEUE_STATEMENTS):  # noqa: SLF001 - the checked-in texts cover every named statement
        # One id for claim_bells, which names as many as it claims.
        found[f"queue/{name}.sql"] = sql.queue_statement(name, QUEUE, ids=1)
    table = WorkflowInstance._meta.db_table
    found["model/update_instance.sql"] = instance_writes.update_statement(
        table, ("alarm_at", "updated_at")
    )
    # A change of status: written only while the row has the status it was read with.
    found["model/move_instance.sql"] = instance_writes.update_statement(
        table, ("status", "alarm_at", "updated_at"), "status"
    )
    # ... and, on PostgreSQL, with its workflow event in the same statement.
    found["model/move_instance_with_event.sql"] = instance_writes.move_statement(
        table,
        ("status", "alarm_at", "updated_at"),
        WorkflowInstance.workflow_events.rel.related_model._meta.db_table,
    )
    found["model/insert_workflow_event.sql"] = instance_writes.insert_event_statement(
        WorkflowInstance.workflow_events.rel.related_model._meta.db_table
    )
    # The start's statements, as composed for a one-column instance and two rows.
    columns = ("key", "input")
    found["start/start_one.sql"] = sql.start_one_statement(columns, QUEUE)
    # ... and as start() composes them, with every column of the instance (its trace
    # context included).
    every = tuple(
        str(f.column) for f in WorkflowInstance._meta.concrete_fields if not f.primary_key
    )
    found["start/start_one_every_column.sql"] = sql.start_one_statement(every, QUEUE)
    found["start/insert_instances_every_column.sql"] = sql.insert_instances_statement(every, 1)
    select = sql.unnest_select(["%s::varchar", "v.c1"], [("c1", "text")])
    found["start/start_batch_with_bells.sql"] = sql.start_batch_statement(columns, select, QUEUE)
    found["start/start_batch.sql"] = sql.start_batch_statement(columns, select, None)
    found["start/insert_instances.sql"] = sql.insert_instances_statement(columns, 2)
    found["start/insert_created_events.sql"] = sql.insert_created_events_statement(2)
    found["start/insert_bells.sql"] = sql.insert_bells_statement(QUEUE, 2)
    found["start/draw_instance_ids.sql"] = sql.DRAW_INSTANCE_IDS
    # send_event()'s delivery on PostgreSQL, with django-q2's queue (a bell) and without.
    found["event/send_event.sql"] = sql.send_event_statement(QUEUE)
    found["event/send_event_without_bells.sql"] = sql.send_event_statement(None)
    # The purge's, for two instances: the instance rows, and a table that points at them.
    found["purge/purge_instances.sql"] = sql.purge_statement(sql.INSTANCE, 2)
    found["purge/purge_workflow_events.sql"] = sql.purge_statement(sql.WORKFLOW_EVENT, 2)
    found["console/distinct_values.sql"] = sql.distinct_values_statement(
        '"workerflow_workflowinstance"', '"definition_version"'
    )
    found["console/explain.sql"] = sql.explain_statement("SELECT 1")
    found["console/sampled_counts.sql"] = sql.sampled_counts_statement(
        '"workerflow_workflowinstance"', 2.5
    )
    found["composition/listen.sql"] = sql.listen_statement("workerflow_finished_1")
    found["composition/unlisten.sql"] = sql.unlisten_statement("workerflow_finished_1")
    return {name: text.strip() + "\n" for name, text in found.items()}


def test_sql_texts__every_statement_is_checked_in_as_it_reaches_the_server():
    current = texts()
    if os.environ.get("WORKERFLOW_WRITE_SQL"):
        for old in HOME.rglob("*.sql"):
            old.unlink()
        for name, text in current.items():
            path = HOME / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    stored = {str(path.relative_to(HOME)): path.read_text() for path in HOME.rglob("*.sql")}
    changed = sorted(name for name in current if stored.get(name) != current[name])
    gone = sorted(set(stored) - set(current))
    rewrite = "Run WORKERFLOW_WRITE_SQL=1 pytest tests/store/test_sql_texts.py and review the diff."
    assert not changed, f"SQL texts changed or new: {changed}. {rewrite}"
    assert not gone, f"SQL texts no longer used: {gone}. {rewrite}"


def test_sql_texts__sqlite_texts_carry_no_postgresql_casts():
    sqlite = {name: text for name, text in texts().items() if name.startswith("sqlite/")}
    declared = [name for name in sql._STATEMENTS if sql.runs_on(name, "sqlite")]  # noqa: SLF001 - the checked-in texts cover every named statement
    assert len(sqlite) == len(declared)
    for name, text in sqlite.items():
        assert "::" not in text, name


def test_sql_texts__every_named_statement_declares_the_databases_that_run_it():
    assert set(sql._DIALECTS) == set(sql._STATEMENTS)  # noqa: SLF001 - the declarations cover every named statement


def test_sql_texts__a_statement_asked_for_a_database_it_is_not_declared_for_raises():
    with pytest.raises(sql.StatementDialectError, match="'lock_instance' is declared for postgres"):
        sql.statement("sqlite", "lock_instance")
    with pytest.raises(sql.StatementDialectError, match="'succeed_run' is declared for sqlite"):
        sql.statement("postgresql", "succeed_run")
