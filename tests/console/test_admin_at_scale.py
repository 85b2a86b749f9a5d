"""The instance list without COUNT(*) over the table or DISTINCT over a column (issue 15):
PostgreSQL's row estimate once it is large, filter choices read through an index."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import django_workerflow as workerflow
from django_workerflow.console import estimated_count
from django_workerflow.console.list_filters import distinct_values
from django_workerflow.models import WorkflowInstance

pytestmark = pytest.mark.django_db

URL = "/admin/workerflow/workflowinstance/"


@pytest.fixture
def instances(define):
    first = define(lambda self: None, name="alpha", version="1")
    second = define(lambda self: None, name="beta", version="2")
    workerflow.start_many(first, [(f"a{n}", n) for n in range(3)])
    workerflow.start_many(second, [(f"b{n}", n) for n in range(2)])


def test_filter_choices__are_the_distinct_values_in_order(instances):
    assert distinct_values(WorkflowInstance, "definition_name", "default") == ["alpha", "beta"]
    assert distinct_values(WorkflowInstance, "definition_version", "default") == ["1", "2"]


def test_change_list__reads_no_distinct_column_and_counts_no_full_table(admin_client, instances):
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(URL)

    assert response.status_code == 200
    body = response.content.decode()
    assert "alpha" in body and "beta" in body  # noqa: PT018 - both filter choices
    sqls = [query["sql"].upper() for query in queries.captured_queries]
    # (the date drill-down of a small list still reads its distinct days)
    assert not any("SELECT DISTINCT" in sql and "DEFINITION_" in sql for sql in sqls)
    # One exact count of the (small) filtered list, none of the whole table besides.
    assert sum("COUNT(" in sql for sql in sqls) <= 1


def test_change_list__shows_postgresqls_estimate_once_it_is_large(
    admin_client, instances, monkeypatch
):
    if connection.vendor != "postgresql":
        pytest.skip("the estimate is PostgreSQL's planner's")
    monkeypatch.setattr(estimated_count, "EXACT_BELOW", 0)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {WorkflowInstance._meta.db_table}")

    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(URL + "?status__exact=pending")

    assert response.status_code == 200
    sqls = [query["sql"].upper() for query in queries.captured_queries]
    assert not any("COUNT(" in sql for sql in sqls)
    assert any(sql.startswith("EXPLAIN") for sql in sqls)


def test_change_list__hides_the_date_drill_down_over_a_large_list(
    admin_client, instances, monkeypatch
):
    monkeypatch.setattr(estimated_count, "LARGE_LIST", 5)

    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(URL)

    assert response.status_code == 200
    assert not any("MIN(" in query["sql"].upper() for query in queries.captured_queries)
