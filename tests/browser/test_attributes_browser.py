"""Attributes in the admin, in a real browser (Debian's chromium through Playwright): an
operator filters the instance list by an attribute, searches it with customer=..., and
follows an attribute from an instance page back to the list. A screenshot of the filtered
list is saved under ``artifacts/``."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

import django_workerflow as workerflow

from .console import CHANGELIST, PASSWORD, login, row

sync_api = pytest.importorskip(
    "playwright.sync_api",
    reason="playwright is not installed: run `bash .ci/install-browser .venv`",
)
expect = sync_api.expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def fulfil(self):
    self.set_attributes(stage="waiting for payment")
    self.wait("payment", "payment.received")


@pytest.fixture
def orders(define, workerflow_harness):
    """Four orders of three customers in two regions, waiting for their payments."""
    definition = define(fulfil, name="shop-order")
    definition.attribute_filters = ["customer", "region"]
    for key, customer, region in [
        ("order-1", "c-42", "eu"),
        ("order-2", "c-42", "us"),
        ("order-3", "c-7", "eu"),
        ("order-4", "c-9", "us"),
    ]:
        workerflow.start(definition, key=key, attributes={"customer": customer, "region": region})
    workerflow_harness.drain()


def test_attributes__filter_search_and_follow_from_an_instance(
    live_server, page, artifacts, orders
):
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    login(page, live_server, "operator")
    results = page.locator("#result_list tbody tr")
    expect(results).to_have_count(4)

    # The list filter: By attribute region, choice eu.
    filters = page.locator("#changelist-filter")
    region = filters.locator("details", has=page.get_by_text("By attribute region"))
    expect(region).to_be_visible()
    region.get_by_role("link", name="eu", exact=True).click()
    expect(results).to_have_count(2)
    expect(row(page, "order-1")).to_be_visible()
    expect(row(page, "order-3")).to_be_visible()
    # ... and by customer too: AND-ed.
    customer = page.locator(
        "#changelist-filter details", has=page.get_by_text("By attribute customer")
    )
    customer.get_by_role("link", name="c-42", exact=True).click()
    expect(results).to_have_count(1)
    expect(row(page, "order-1")).to_be_visible()
    page.screenshot(path=str(artifacts / "admin-attribute-filter.png"), full_page=True)

    # The search box: customer=c-42 finds both of that customer's orders.
    page.goto(live_server.url + CHANGELIST)
    page.fill("#searchbar", "customer=c-42")
    page.locator("#changelist-search input[type=submit]").click()
    expect(results).to_have_count(2)
    expect(row(page, "order-2")).to_be_visible()
    # A key search still works beside an attribute term.
    page.fill("#searchbar", "order-2 region=us")
    page.locator("#changelist-search input[type=submit]").click()
    expect(results).to_have_count(1)

    # The instance page shows its attributes; one leads to the instances sharing it.
    page.goto(live_server.url + CHANGELIST)
    row(page, "order-3").get_by_role("link", name="order-3").click()
    line = page.locator("#wf-attributes")
    expect(line).to_contain_text("customer = c-7")
    expect(line).to_contain_text("stage = waiting for payment")
    line.get_by_role("link", name="region = eu").click()
    expect(results).to_have_count(2)
    expect(page.locator("#searchbar")).to_have_value("region=eu")
