"""The operations console driven in a real browser (Debian's chromium through Playwright).

An operator logs in, filters the list, opens an instance, reads its step tree and timeline,
pauses, resumes, cancels with a reason and sends an event (a bad payload, then a good one). A
staff user without the permissions sees no action and is refused a crafted POST. Screenshots
of the change list and the change page are saved under ``artifacts/``.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User

import django_workerflow as workerflow
from django_workerflow.models import InboundEvent, WorkflowEvent, WorkflowInstance

from .console import CHANGELIST, PASSWORD, login, message, row

sync_api = pytest.importorskip(
    "playwright.sync_api",
    reason="playwright is not installed: run `bash .ci/install-browser .venv`",
)
expect = sync_api.expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ATTEMPTS: Counter[str] = Counter()
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def checkout(self):
    """Reserve (two nested steps), charge with retries, cool off, await payment, ship."""

    def reserve():
        self.run("check-stock", lambda: {"in_stock": True})
        self.run("hold-items", lambda: {"hold": "H-17"})
        return {"reserved": self.input["items"]}

    def charge():
        ATTEMPTS[self.key] += 1
        if ATTEMPTS[self.key] <= self.input["failures"]:
            raise RuntimeError("card declined by issuer")
        return {"charge_id": "ch_3Pq", "amount": self.input["total"]}

    self.run("reserve", reserve)
    self.run("charge", charge, backoff=lambda attempt: 30 * attempt)
    self.sleep("cool-off", 600)
    payment = self.wait("await-payment", "payment.received", timeout=3600)
    shipment = self.run("ship", lambda: {"tracking": "TRK-1001"})
    return {"payment": payment, "shipment": shipment}


@pytest.fixture
def orders(define, workerflow_harness):
    """order-1001 waits for its payment after two failed charges and a sleep; order-0999
    failed its charge; order-1002 and order-1004 are sleeping."""
    ATTEMPTS.clear()
    definition = define(checkout, name="checkout", version="2026-03-19")
    order = {"items": ["A-1", "B-2"], "total": "49.90"}
    workerflow.start(definition, key="order-1001", input={**order, "failures": 2})
    workerflow.start(definition, key="order-0999", input={**order, "failures": 9})
    harness = workerflow_harness
    harness.drain()
    harness.advance(30)
    harness.advance(60)
    harness.advance(600)
    harness.advance(300)
    workerflow.start(definition, key="order-1002", input={**order, "failures": 0})
    workerflow.start(definition, key="order-1004", input={**order, "failures": 0})
    harness.drain()
    return harness


def save_docs_screenshot(page) -> None:
    """Refresh the README's picture of the change page (WORKERFLOW_DOCS_SCREENSHOTS=1):
    navigation sidebar closed, from the top down to the step tree."""
    page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.reload()
    page.locator('tr[data-step="charge"] details.wf-attempts summary').click()
    bottom = page.evaluate(
        "document.querySelector('#wf-steps').getBoundingClientRect().bottom + window.scrollY"
    )
    DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(
        path=str(DOCS_IMAGES / "admin-change-page.png"),
        full_page=True,
        clip={"x": 0, "y": 0, "width": 1280, "height": bottom + 16},
    )
    page.evaluate("localStorage.removeItem('django.admin.navSidebarIsOpen')")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.reload()


def run_list_action(page, key: str, action: str) -> None:
    row(page, key).locator("input.action-select").check()
    page.select_option("select[name=action]", action)
    # The button reads "Go" (Django 5.2) or "Run" (Django 6): find it by its name attribute.
    page.locator("div.actions button[name=index]").first.click()


def test_operator_console__filter_open_pause_resume_send_event_and_cancel(
    live_server, page, artifacts, orders
):
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    login(page, live_server, "operator")

    # The list: every instance, in words.
    expect(page.locator("#result_list tbody tr")).to_have_count(4)
    expect(row(page, "order-1001")).to_contain_text("waiting for event 'payment.received' until")
    expect(row(page, "order-1002")).to_contain_text("sleeping until")
    page.screenshot(path=str(artifacts / "admin-change-list.png"), full_page=True)

    # Filter by status.
    page.locator("#changelist-filter").get_by_role("link", name="Failed").click()
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(row(page, "order-0999")).to_contain_text(
        "failed in step 'charge': RuntimeError: card declined by issuer"
    )

    # Pause from the list, resume from the instance page.
    page.goto(live_server.url + CHANGELIST)
    run_list_action(page, "order-1002", "pause_selected")
    expect(message(page)).to_have_text("Paused 'order-1002'.")
    expect(row(page, "order-1002").locator(".wf-badge")).to_have_text("Paused")
    row(page, "order-1002").get_by_role("link", name="order-1002").click()
    page.get_by_role("button", name="Resume").click()
    expect(message(page)).to_have_text("Resumed 'order-1002'.")
    assert WorkflowInstance.objects.get(key="order-1002").status == "running"

    # Open an instance and read its step tree and timeline.
    page.goto(live_server.url + CHANGELIST)
    page.get_by_role("link", name="order-1001").click()
    steps = page.locator("tr.wf-step-row")
    expect(steps).to_have_count(6)
    assert [steps.nth(i).get_attribute("data-step") for i in range(6)] == [
        "reserve",
        "check-stock",
        "hold-items",
        "charge",
        "cool-off",
        "await-payment",
    ]
    assert page.locator('tr[data-step="check-stock"]').get_attribute("data-depth") == "1"
    charge = page.locator('tr[data-step="charge"]')
    expect(charge).to_contain_text("3 of 3")
    charge.locator("details.wf-attempts summary").click()
    expect(charge.locator("ol li")).to_have_count(3)
    expect(charge.locator("ol li").first).to_contain_text("RuntimeError: card declined by issuer")
    bars = page.locator("#wf-timeline .wf-tl-row")
    expect(bars.locator(".wf-seg-attempt-failed")).to_have_count(2)
    expect(bars.locator(".wf-seg-backoff")).to_have_count(2)
    expect(bars.locator(".wf-seg-sleep-elapsed")).to_have_count(1)
    expect(bars.locator(".wf-seg-wait.wf-open")).to_have_count(1)
    timeline = page.locator("#wf-timeline")
    expect(timeline).to_contain_text("3 attempts, 2 failed")
    page.screenshot(path=str(artifacts / "admin-change-page.png"), full_page=True)
    if os.environ.get("WORKERFLOW_DOCS_SCREENSHOTS"):
        save_docs_screenshot(page)

    # Send an event: a bad payload is a form error and sends nothing; a good one is claimed.
    page.get_by_role("link", name="Send event…").click()
    page.fill("#id_event_name", "payment.received")
    page.fill("#id_payload", '{"amount": 49.90')
    page.get_by_role("button", name="Send event").click()
    expect(page.locator(".errorlist")).to_contain_text("This is not valid JSON")
    assert not InboundEvent.objects.exists()
    page.fill("#id_payload", '{"amount": "49.90", "method": "card"}')
    page.get_by_role("button", name="Send event").click()
    expect(message(page)).to_have_text(
        "Sent event 'payment.received' to 'order-1001': step 'await-payment' claimed it."
    )
    orders.drain()
    page.reload()
    expect(page.locator("#wf-summary .wf-badge")).to_have_text("Completed")
    expect(page.locator("#wf-result")).to_contain_text('"tracking": "TRK-1001"')

    # Cancel from the list, with a reason, and find it in the history.
    page.goto(live_server.url + CHANGELIST)
    run_list_action(page, "order-1004", "cancel_selected")
    expect(page.locator("#wf-selected")).to_contain_text("order-1004")
    page.fill("#id_reason", "customer called: duplicate order")
    page.get_by_role("button", name="Yes, cancel").click()
    expect(message(page)).to_have_text(
        "Cancelled 'order-1004'. Reason: customer called: duplicate order"
    )
    expect(row(page, "order-1004")).to_contain_text("cancelled: customer called: duplicate order")
    cancelled = WorkflowEvent.objects.get(instance__key="order-1004", type="cancelled")
    assert cancelled.reason == "customer called: duplicate order"
    row(page, "order-1004").get_by_role("link", name="order-1004").click()
    page.get_by_role("link", name="History").click()
    expect(page.locator("#change-history")).to_contain_text("customer called: duplicate order")


def test_staff_without_permissions__sees_no_action_and_gets_403(live_server, page, orders):
    viewer = User.objects.create_user("viewer", password=PASSWORD, is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_workflowinstance"))
    instance = WorkflowInstance.objects.get(key="order-1002")
    login(page, live_server, "viewer")

    expect(page.locator("#result_list tbody tr")).to_have_count(4)
    expect(page.locator("select[name=action]")).to_have_count(0)
    expect(page.locator("input.action-select")).to_have_count(0)
    row(page, "order-1002").get_by_role("link", name="order-1002").click()
    expect(page.locator("#wf-steps")).to_be_visible()
    expect(page.locator("#wf-controls")).to_have_count(0)

    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    crafted = [
        (CHANGELIST, {"action": "pause_selected", "index": "0"}),
        (CHANGELIST, {"action": "cancel_selected", "apply": "1", "reason": "crafted"}),
        (CHANGELIST, {"action": "send_event", "apply": "1", "event_name": "x", "payload": "1"}),
        (f"{CHANGELIST}{instance.pk}/pause/", {}),
        (f"{CHANGELIST}{instance.pk}/cancel/", {"reason": "crafted"}),
    ]
    for path, data in crafted:
        form = {"csrfmiddlewaretoken": token, "_selected_action": str(instance.pk), **data}
        response = page.request.post(live_server.url + path, form=form)
        assert response.status == 403, (path, data, response.status)

    instance.refresh_from_db()
    assert instance.status == "running"
    assert not InboundEvent.objects.exists()
