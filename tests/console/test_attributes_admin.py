"""Attributes in the admin: the search box's name=value terms, the list filters a
definition asks for, and the instance page."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import django_workerflow as workerflow
from django_workerflow.console import attributes as console_attributes
from django_workerflow.models import WorkflowInstance

pytestmark = pytest.mark.django_db

URL = "/admin/workerflow/workflowinstance/"


@pytest.fixture
def shop_orders(define):
    definition = define(lambda self: None, name="test-shop-order")
    definition.attribute_filters = ["customer", "region"]
    for number, (customer, region) in enumerate(
        [("c-42", "eu"), ("c-42", "us"), ("c-7", "eu"), ("42", "eu")]
    ):
        workerflow.start(
            definition,
            key=f"order-{number}",
            attributes={"customer": customer, "region": region, "total": number * 10},
        )
    workerflow.start(definition, key="order-plain")
    return definition


def _keys(response) -> set[str]:
    return {i.key for i in response.context["cl"].result_list}


def test_search__name_equals_value_finds_the_instances_holding_it(admin_client, shop_orders):
    response = admin_client.get(URL, {"q": "customer=c-42"})
    assert _keys(response) == {"order-0", "order-1"}


def test_search__terms_are_anded_and_typed(admin_client, shop_orders):
    assert _keys(admin_client.get(URL, {"q": "customer=c-42 region=us"})) == {"order-1"}
    assert _keys(admin_client.get(URL, {"q": "total=30"})) == {"order-3"}
    # A quoted number is the string: customer "42", not a number 42.
    assert _keys(admin_client.get(URL, {"q": 'customer="42"'})) == {"order-3"}
    assert _keys(admin_client.get(URL, {"q": "customer=42"})) == set()


def test_search__the_key_search_still_works_alone_and_with_an_attribute(admin_client, shop_orders):
    assert _keys(admin_client.get(URL, {"q": "plain"})) == {"order-plain"}
    assert _keys(admin_client.get(URL, {"q": "order-1 region=us"})) == {"order-1"}
    # Not an attribute name on the left: text for the key search.
    assert _keys(admin_client.get(URL, {"q": "no-such=thing"})) == set()


def test_list_filter__lists_the_recent_values_and_filters_by_one(admin_client, shop_orders):
    response = admin_client.get(URL)
    body = response.content.decode()
    assert "By attribute customer" in body
    assert "By attribute region" in body
    assert f"attr_customer={quote(json.dumps('c-42'))}" in body

    filtered = admin_client.get(URL, {"attr_customer": json.dumps("c-42"), "attr_region": '"eu"'})
    assert _keys(filtered) == {"order-0"}
    assert _keys(admin_client.get(URL, {"attr_customer": '"42"'})) == {"order-3"}


def test_list_filter__a_value_beyond_the_sample_is_still_shown_as_chosen(
    admin_client, shop_orders, monkeypatch
):
    monkeypatch.setattr(console_attributes, "SAMPLE", 1)
    response = admin_client.get(URL, {"attr_customer": '"c-7"'})
    assert _keys(response) == {"order-2"}
    assert "c-7" in response.content.decode()


def test_list_filter__only_for_attributes_a_definition_names(admin_client, define):
    define(lambda self: None).attribute_filters = []
    body = admin_client.get(URL).content.decode()
    assert "By attribute" not in body


def test_change_list__filtered_by_attribute_reads_no_distinct_and_counts_once(
    admin_client, shop_orders
):
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(URL, {"attr_customer": '"c-42"', "q": "region=eu"})
    assert response.status_code == 200
    assert _keys(response) == {"order-0"}
    sqls = [query["sql"].upper() for query in queries.captured_queries]
    # (the date drill-down of a small list still reads its distinct days)
    assert not any("DISTINCT" in sql and "ATTRIBUTES" in sql.split(" FROM ")[0] for sql in sqls)
    assert sum("COUNT(" in sql for sql in sqls) <= 1
    # The choices of both filters: one bounded read.
    bounded = [s for s in sqls if '"ATTRIBUTES"' in s and f"LIMIT {console_attributes.SAMPLE}" in s]
    assert len(bounded) == 1


def test_change_page__shows_the_attributes_as_links_to_the_list(admin_client, shop_orders):
    instance = WorkflowInstance.objects.get(key="order-3")
    body = admin_client.get(f"{URL}{instance.pk}/change/").content.decode()
    assert 'id="wf-attributes"' in body
    assert "<code>customer</code> = 42" in body
    # The link finds the string "42", not the number.
    assert "?q=customer%3D%2242%22" in body
    assert _keys(admin_client.get(URL, {"q": 'customer="42"'})) == {"order-3"}


def test_change_page__without_attributes_has_no_line(admin_client, shop_orders):
    instance = WorkflowInstance.objects.get(key="order-plain")
    body = admin_client.get(f"{URL}{instance.pk}/change/").content.decode()
    assert 'id="wf-attributes"' not in body


@pytest.mark.parametrize(
    ("term", "wanted", "rest"),
    [
        ("customer=c-42", {"customer": "c-42"}, ""),
        ('customer="c 42" key-1', {"customer": "c 42"}, "key-1"),
        ("customer='c 42'", {"customer": "c 42"}, ""),
        ("vip=true n=3", {"vip": True, "n": 3}, ""),
        ("a=b=c", {"a": "b=c"}, ""),
        ("=x 9a=1 key", {}, "=x 9a=1 key"),
    ],
)
def test_split_search__reads_attribute_terms(term, wanted, rest):
    assert console_attributes.split_search(term) == (wanted, rest)
