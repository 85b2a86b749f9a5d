"""The hot statements on PostgreSQL: prepared and bound on the server through a cursor
Django wraps, without changing how anything else runs (store/executor.py)."""

from __future__ import annotations

import pytest
from django.db import DataError, connection
from django.test.utils import CaptureQueriesContext

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance
from django_workerflow.store import executor
from tests.support.statements import label, prepared_on_server

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        "connection.vendor != 'postgresql'", reason="PostgreSQL prepares the hot statements"
    ),
]


def test_executor__a_failing_prepared_statement_raises_djangos_error_and_the_connection_goes_on():
    with connection.cursor() as cursor:
        with pytest.raises(DataError):
            executor.execute(cursor, "probe", [0], text="SELECT 1 / %s")
        for divisor in (1, 2):
            row = executor.execute(cursor, "probe", [divisor], text="SELECT 10 / %s")
            assert row.fetchone() == (10 // divisor,)

    # The runs after the error share one preparation.
    assert [runs for sql, runs in prepared_on_server().items() if "10 /" in sql] == [2]


def test_executor__prepares_only_its_own_statements(define):
    workflow = define(lambda self: None)
    connection.close()  # a new session
    for number in range(3):
        workerflow.start(workflow, key=f"k{number}")
    for _ in range(10):
        list(WorkflowInstance.objects.filter(key="k1"))  # the ORM's own cursor

    prepared = prepared_on_server()
    assert prepared
    assert all(sql.startswith("/* workerflow_") for sql in prepared), prepared
    assert connection.connection.prepare_threshold == executor.NO_AUTOMATIC_PREPARING


def test_executor__while_django_logs_queries_the_log_shows_each_statement_with_its_values(define):
    workflow = define(lambda self: None)
    workerflow.start(workflow, key="first")

    with CaptureQueriesContext(connection) as captured:
        workerflow.start(workflow, key="logged-key")

    [logged] = [q["sql"] for q in captured if label("start_one") in q["sql"]]
    assert "'logged-key'" in logged
