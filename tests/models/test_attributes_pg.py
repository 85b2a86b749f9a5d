"""Attribute filters on PostgreSQL: the GIN index serves filter(attributes__<name>=value)
over many instances, and answers what a Python filter answers."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from bench.admin_scale import fill_instances
from django_workerflow.models import WorkflowInstance
from django_workerflow.models.attributes import INDEX_NAME
from django_workerflow.values import attributes as values

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="needs PostgreSQL (WORKERFLOW_DB=postgres)"
    ),
    pytest.mark.django_db,
]

COUNT = 20_000
#: Every instance has a customer of 5,000, a region of 3 and a vip flag; every tenth an
#: order number.
ATTRIBUTES = (
    "jsonb_build_object('customer', 'c-' || (g %% 5000), 'region', "
    "(ARRAY['eu', 'us', 'apac'])[1 + g %% 3], 'vip', g %% 7 = 0) "
    "|| CASE WHEN g %% 10 = 0 THEN jsonb_build_object('order', g) ELSE '{}'::jsonb END"
)


@pytest.fixture
def many():
    fill_instances(COUNT, expressions_of={"attributes": ATTRIBUTES})
    with connection.cursor() as cursor:
        # What autovacuum does after a bulk load: move the index's pending entries into it.
        cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [INDEX_NAME])


def _plan(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_filter__is_served_by_the_gin_index(many):
    plan = _plan(WorkflowInstance.objects.filter(attributes__customer="c-42"))
    assert f"Bitmap Index Scan on {INDEX_NAME}" in plan, plan


def test_filter__the_admins_first_page_is_served_by_the_gin_index(many):
    page = WorkflowInstance.objects.filter(attributes__customer="c-42").order_by(
        "-created_at", "-id"
    )[:50]
    plan = _plan(page)
    assert INDEX_NAME in plan, plan


def test_filter__two_attributes_use_the_index(many):
    plan = _plan(WorkflowInstance.objects.filter(attributes__customer="c-42", attributes__order=42))
    assert INDEX_NAME in plan, plan


@pytest.mark.parametrize(
    ("name", "value"),
    [("customer", "c-42"), ("region", "apac"), ("vip", True), ("order", 420), ("order", "420")],
)
def test_filter__answers_what_a_python_filter_answers(many, name, value):
    found = set(
        WorkflowInstance.objects.filter(**{f"attributes__{name}": value}).values_list(
            "pk", flat=True
        )
    )
    truth = {
        pk
        for pk, held in WorkflowInstance.objects.values_list("pk", "attributes")
        if values.matches(held if isinstance(held, dict) else json.loads(held), name, value)
    }
    assert found == truth
    assert found or value == "420"
