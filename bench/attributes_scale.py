"""Scenario ``attributes``: finding instances by attribute at scale (PostgreSQL).

``admin_instances`` instances (a million) are written with one INSERT ... SELECT from
``generate_series`` (:func:`.admin_scale.fill_instances`), each with attributes: one of
100,000 customers (ten instances each), one of four regions (a quarter each) and, on every
fiftieth, ``vip: true``. Then, ``admin_repeats * 4`` times each with a different customer:

- ``filter``: ``list(WorkflowInstance.objects.filter(attributes__customer=...))``, the
  whole rows, timed right after the load (GIN's pending entries as the load left them) and
  after ``gin_clean_pending_list`` (what autovacuum does);
- ``first_page``: the admin's query: the same filter, newest first, 50 rows;
- ``count``: the filter's ``count()``;
- ``region_page``: a filter matching a quarter of the table, newest first, 50 rows;
- the instance change list through Django's test client (a logged-in superuser),
  unfiltered (for comparison), filtered by the customer's list filter, by a
  ``customer=...`` search, and by the region filter.

Each query's plan is kept (``EXPLAIN``) to show the index it uses. The tables are emptied
afterwards.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_workerflow import registry
from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.models import WorkflowInstance
from django_workerflow.models.attributes import INDEX_NAME

from .admin_scale import fill_instances
from .common import Sizes

CUSTOMERS = 100_000
REGIONS = ("eu", "us", "apac", "latam")
ATTRIBUTES = (
    f"jsonb_build_object('customer', 'c-' || (g %% {CUSTOMERS}), 'region', "
    f"(ARRAY[{', '.join(repr(r) for r in REGIONS)}])[1 + g %% {len(REGIONS)}]) "
    "|| CASE WHEN g %% 50 = 0 THEN '{\"vip\": true}'::jsonb ELSE '{}'::jsonb END"
)
URL = "/admin/workerflow/workflowinstance/"


def _customers(count: int) -> list[str]:
    """``count`` customers spread over the series (each holds ten instances)."""
    step = CUSTOMERS // count
    return [f"c-{n * step + 7}" for n in range(count)]


def _timed(run: Callable[[str], Any], values: list[str]) -> dict[str, Any]:
    run(values[0])  # warm: the plan, the first pages
    timings = []
    for value in values:
        began = time.perf_counter()
        run(value)
        timings.append(time.perf_counter() - began)
    return {
        "median_ms": statistics.median(timings) * 1000,
        "max_ms": max(timings) * 1000,
        "runs": len(timings),
    }


def _plan(queryset: Any) -> str:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def _page(client: Client, query: dict[str, str]) -> None:
    response = client.get(f"{URL}?{urlencode(query)}")
    if response.status_code != 200:
        raise RuntimeError(f"GET {URL}?{urlencode(query)} answered {response.status_code}.")


def _queries(client: Client, query: dict[str, str]) -> dict[str, Any]:
    with CaptureQueriesContext(connection) as captured:
        _page(client, query)
    sqls = [q["sql"] for q in captured.captured_queries]
    return {
        "queries": len(sqls),
        "counting_queries": [s[:160] for s in sqls if "COUNT(" in s.upper()],
    }


def attributes_scale(sizes: Sizes, progress: Any) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        return {"skipped": "measured on PostgreSQL"}
    from django.contrib.auth import get_user_model

    class BenchAttributes(WorkflowDefinition):
        name = "bench-attributes"
        attribute_filters = ["customer", "region"]

        def execute(self) -> None:
            return None

    instances = WorkflowInstance.objects
    progress(f"attributes: {sizes.admin_instances:,} instances with attributes")
    began = time.perf_counter()
    fill_instances(sizes.admin_instances, expressions_of={"attributes": ATTRIBUTES})
    fill_seconds = time.perf_counter() - began
    customers = _customers(sizes.admin_repeats * 4)
    user = get_user_model().objects.create_superuser(f"bench-{uuid.uuid4().hex[:8]}", "", "x")
    client = Client()
    client.force_login(user)

    def by_customer(customer: str) -> Any:
        return instances.filter(attributes__customer=customer)

    def newest(queryset: Any) -> Any:
        return queryset.order_by("-created_at", "-id")[:50]

    try:
        result: dict[str, Any] = {
            "instances": instances.count(),
            "fill_seconds": fill_seconds,
            "filter_after_load": _timed(lambda c: list(by_customer(c)), customers),
        }
        with connection.cursor() as cursor:
            began = time.perf_counter()
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [INDEX_NAME])
            cursor.execute(f"ANALYZE {WorkflowInstance._meta.db_table}")
            result["clean_pending_seconds"] = time.perf_counter() - began
        found = list(by_customer(customers[0]))
        result["rows_per_customer"] = len(found)
        result["filter"] = _timed(lambda c: list(by_customer(c)), customers)
        result["first_page"] = _timed(lambda c: list(newest(by_customer(c))), customers)
        result["count"] = _timed(lambda c: by_customer(c).count(), customers)
        regions = [REGIONS[n % len(REGIONS)] for n in range(len(customers))]
        result["region_page"] = _timed(
            lambda r: list(newest(instances.filter(attributes__region=r))), regions
        )
        result["plans"] = {
            "filter": _plan(by_customer(customers[0])),
            "first_page": _plan(newest(by_customer(customers[0]))),
            "region_page": _plan(newest(instances.filter(attributes__region="eu"))),
        }
        progress("attributes: the admin's change list")
        filtered = {"attr_customer": json.dumps(customers[0])}
        searched = {"q": f"customer={customers[0]}"}
        region = {"attr_region": json.dumps("eu")}
        result["admin_unfiltered"] = _timed(lambda _c: _page(client, {}), customers)
        result["admin_filtered"] = _timed(
            lambda c: _page(client, {"attr_customer": json.dumps(c)}), customers
        )
        result["admin_searched"] = _timed(
            lambda c: _page(client, {"q": f"customer={c}"}), customers
        )
        result["admin_region"] = _timed(
            lambda r: _page(client, {"attr_region": json.dumps(r)}), regions
        )
        result["admin_queries"] = {
            "filtered": _queries(client, filtered),
            "searched": _queries(client, searched),
            "region": _queries(client, region),
        }
        return result
    finally:
        registry.unregister(BenchAttributes)
        user.delete()
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {WorkflowInstance._meta.db_table} CASCADE")
