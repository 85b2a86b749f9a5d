"""Recovery in a real browser (Debian's chromium through Playwright): an operator reads a
failed instance's traceback and retries it; a stuck instance whose version no worker has is
forked onto the new version from one of its steps. Without the permissions, neither button
nor action shows and a crafted POST is refused. The change list fits 1,280 px.

With WORKERFLOW_DOCS_SCREENSHOTS=1 the pictures in docs/images/ are written again.
"""

from __future__ import annotations

import linecache
import os
from collections import Counter
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User

import django_workerflow as workerflow
from django_workerflow import registry
from django_workerflow.models import WorkflowInstance

from .console import CHANGELIST, PASSWORD, login, message, row

sync_api = pytest.importorskip(
    "playwright.sync_api",
    reason="playwright is not installed: run `bash .ci/install-browser .venv`",
)
expect = sync_api.expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
CALLS: Counter[str] = Counter()
SERVICE = {"up": False}


# The invoice workflow as an application defines it, in shop/workflows.py: tracebacks (and the
# screenshots of them) name that file, not this test module.
SHOP_WORKFLOWS = """\
def invoice(self):
    \"\"\"Fetch the order, then send the invoice.\"\"\"
    order = self.run("fetch-order", lambda: CALLS.update(["fetch-order"]) or {"total": 49.9})

    def send_invoice():
        CALLS["send-invoice"] += 1
        if not SERVICE["up"]:
            raise ConnectionError("mail service unreachable: smtp.example.com:587 refused")
        return {"sent_to": "ada@example.com", "total": order["total"]}

    return self.run("send-invoice", send_invoice, max_attempts=3, backoff=lambda n: 30)
"""
SHOP_FILE = "shop/workflows.py"


def shop_invoice():
    """``invoice`` compiled from ``SHOP_WORKFLOWS`` as if read from ``shop/workflows.py``."""
    linecache.cache[SHOP_FILE] = (
        len(SHOP_WORKFLOWS),
        None,  # no modification time: linecache.checkcache keeps the entry
        SHOP_WORKFLOWS.splitlines(keepends=True),
        SHOP_FILE,
    )
    namespace = {"CALLS": CALLS, "SERVICE": SERVICE}
    exec(compile(SHOP_WORKFLOWS, SHOP_FILE, "exec"), namespace)
    return namespace["invoice"]


def checkout_v1(self):
    """The old shape: reserve, charge, then wait for an event nobody sends any more."""
    self.run("reserve", lambda: CALLS.update(["reserve"]) or {"hold": "H-17"})
    self.run("charge", lambda: CALLS.update(["charge"]) or {"charge_id": "ch_3Pq"})
    return self.wait("await-payment", "payment.received.v1")


def checkout_v2(self):
    """The fixed shape: the same first steps, and shipping without the obsolete wait."""
    hold = self.run("reserve", lambda: CALLS.update(["reserve"]) or {"hold": "H-17"})
    charge = self.run("charge", lambda: CALLS.update(["charge"]) or {"charge_id": "ch_3Pq"})
    ship = self.run("ship", lambda: CALLS.update(["ship"]) or {"tracking": "TRK-1001"})
    return {**hold, **charge, **ship}


@pytest.fixture
def trouble(define, workerflow_harness):
    """invoice-7 failed after three attempts and invoice-8 waits to retry its first;
    order-1001 (checkout v1, no longer deployed) is stuck waiting for an obsolete event;
    order-1002 is a healthy v2 instance that completed."""
    CALLS.clear()
    SERVICE["up"] = False
    invoices = define(shop_invoice(), name="invoice", version="3")
    workerflow.start(invoices, key="invoice-7")
    v1 = define(checkout_v1, name="checkout", version="1")
    workerflow.start(v1, key="order-1001", input={"items": ["A-1"]})
    workerflow_harness.drain()
    for _ in range(3):  # each attempt, then its retry's backoff
        workerflow_harness.advance(600)
    registry.unregister(v1)  # the deploy removed v1: no worker has it any more
    v2 = define(checkout_v2, name="checkout", version="2")
    workerflow.start(v2, key="order-1002", input={"items": ["B-2"]})
    workerflow.start(invoices, key="invoice-8")
    workerflow_harness.drain()
    return workerflow_harness


def docs_screenshot(page, name: str) -> None:
    """Write docs/images/<name> (WORKERFLOW_DOCS_SCREENSHOTS=1): 1,280 px wide, sidebar
    closed, the whole page."""
    if not os.environ.get("WORKERFLOW_DOCS_SCREENSHOTS"):
        return
    DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(DOCS_IMAGES / name), full_page=True)


def operator_page(chromium, *, sidebar_open: bool = False):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    state = "true" if sidebar_open else "false"
    context.add_init_script(f"localStorage.setItem('django.admin.navSidebarIsOpen', '{state}')")
    return context, context.new_page()


@pytest.mark.parametrize("sidebar_open", [True, False], ids=["sidebar-open", "sidebar-closed"])
def test_change_list__fits_1280_px_without_horizontal_scroll(
    live_server, chromium, artifacts, trouble, sidebar_open
):
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    context, page = operator_page(chromium, sidebar_open=sidebar_open)
    try:
        login(page, live_server, "operator")
        expect(page.locator("#result_list tbody tr")).to_have_count(4)
        expect(row(page, "order-1001")).to_contain_text(
            "no worker has workflow 'checkout' version '1'"
        )
        expect(row(page, "invoice-8")).to_contain_text("retrying step 'send-invoice' at")
        expect(page.locator("#nav-sidebar")).to_be_visible(visible=sidebar_open)
        widths = page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        name = f"admin-change-list-1280-{'sidebar' if sidebar_open else 'no-sidebar'}.png"
        page.screenshot(path=str(artifacts / name), full_page=True)
        assert widths[0] <= widths[1], widths
    finally:
        context.close()


def test_operator__reads_the_traceback_and_retries_a_failed_instance(
    live_server, chromium, artifacts, trouble
):
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    context, page = operator_page(chromium)
    try:
        login(page, live_server, "operator")
        expect(row(page, "invoice-7")).to_contain_text(
            "failed in step 'send-invoice': ConnectionError: mail service unreachable"
        )
        row(page, "invoice-7").get_by_role("link", name="invoice-7").click()

        # The summary, then the tracebacks, collapsed; open the workflow's failure.
        expect(page.locator("#wf-summary .wf-badge")).to_have_text("Failed")
        tracebacks = page.locator("#wf-tracebacks details.wf-traceback")
        expect(tracebacks).to_have_count(4)  # the workflow's failure and three attempts
        expect(tracebacks.first.locator("pre")).not_to_be_visible()
        tracebacks.first.locator("summary").click()
        expect(tracebacks.first.locator("pre")).to_contain_text("raise ConnectionError(")
        expect(tracebacks.first.locator("pre")).to_contain_text(f'File "{SHOP_FILE}", line 8')
        docs_screenshot(page, "admin-retry-failed.png")
        page.screenshot(path=str(artifacts / "admin-retry-failed.png"), full_page=True)

        # Retry, with a reason, once the mail service is back.
        SERVICE["up"] = True
        page.locator("#wf-controls").get_by_role("link", name="Retry").click()
        expect(page.locator("#wf-selected")).to_contain_text("invoice-7")
        page.fill("#id_reason", "mail relay fixed (INC-2231)")
        page.get_by_role("button", name="Yes, retry").click()
        expect(message(page)).to_have_text(
            "Retried 'invoice-7'. Reason: mail relay fixed (INC-2231)"
        )
        expect(page.locator("#wf-summary .wf-badge")).to_have_text("Running")
        trouble.drain()
        page.reload()
        expect(page.locator("#wf-summary .wf-badge")).to_have_text("Completed")
        expect(page.locator("#wf-result")).to_contain_text('"sent_to": "ada@example.com"')
        expect(page.locator("#wf-workflow-events")).to_contain_text("mail relay fixed (INC-2231)")
        expect(page.locator('tr[data-step="send-invoice"]')).to_contain_text("4 of 6")
        docs_screenshot(page, "admin-retry-done.png")
        assert CALLS["fetch-order"] == 2  # once per instance, never again on the retry
        assert CALLS["send-invoice"] == 5  # invoice-7's 3 + its retry, invoice-8's first
        assert LogEntry.objects.filter(object_repr__contains="invoice-7").count() == 1
    finally:
        context.close()


def test_operator__forks_a_stuck_instance_onto_the_new_version(
    live_server, chromium, artifacts, trouble
):
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    context, page = operator_page(chromium)
    try:
        login(page, live_server, "operator")
        row(page, "order-1001").get_by_role("link", name="order-1001").click()
        expect(page.locator("#wf-missing-definition")).to_contain_text(
            "no worker has workflow 'checkout' version '1'"
        )
        expect(page.locator("#wf-waiting-on")).to_have_count(0)

        page.locator("#wf-controls").get_by_role("link", name="Fork…").click()
        steps = page.locator("#id_from_step option")
        expect(steps).to_have_text(
            ["(none: copy every settled step, run the rest)", "reserve", "charge", "await-payment"]
        )
        expect(page.locator("#id_version")).to_have_value("2")
        page.select_option("#id_from_step", "await-payment")
        page.fill("#id_reason", "v1 waits for an event that is no longer sent")
        docs_screenshot(page, "admin-fork-form.png")
        page.get_by_role("button", name="Fork").click()

        expect(message(page)).to_contain_text(
            "Forked 'order-1001' into 'order-1001~1' (checkout v2), from step 'await-payment'."
        )
        expect(page.locator("#wf-forked-from")).to_contain_text("forked from order-1001")
        trouble.drain()
        page.reload()
        expect(page.locator("#wf-summary .wf-badge")).to_have_text("Completed")
        expect(page.locator("#wf-result")).to_contain_text('"tracking": "TRK-1001"')
        docs_screenshot(page, "admin-fork-done.png")
        page.screenshot(path=str(artifacts / "admin-fork-done.png"), full_page=True)
        assert CALLS["reserve"] == 2  # order-1001 and order-1002; the fork copied it
        assert CALLS["charge"] == 2
        assert WorkflowInstance.objects.get(key="order-1001").status == "running"
    finally:
        context.close()


def test_staff_without_the_permissions__sees_no_retry_or_fork_and_gets_403(
    live_server, page, trouble
):
    viewer = User.objects.create_user("viewer", password=PASSWORD, is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_workflowinstance"))
    failed = WorkflowInstance.objects.get(key="invoice-7")
    login(page, live_server, "viewer")

    row(page, "invoice-7").get_by_role("link", name="invoice-7").click()
    expect(page.locator("#wf-summary")).to_be_visible()
    expect(page.get_by_role("link", name="Retry")).to_have_count(0)
    expect(page.get_by_role("link", name="Fork…")).to_have_count(0)

    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    crafted = [
        (CHANGELIST, {"action": "retry_selected", "apply": "1", "reason": "crafted"}),
        (CHANGELIST, {"action": "fork_selected", "index": "0"}),
        (f"{CHANGELIST}{failed.pk}/retry/", {"reason": "crafted"}),
        (f"{CHANGELIST}{failed.pk}/fork/", {"version": "3", "from_step": ""}),
    ]
    for path, data in crafted:
        form = {"csrfmiddlewaretoken": token, "_selected_action": str(failed.pk), **data}
        response = page.request.post(live_server.url + path, form=form)
        assert response.status == 403, (path, data, response.status)

    failed.refresh_from_db()
    assert failed.status == "failed"
    assert WorkflowInstance.objects.count() == 4
    assert not LogEntry.objects.exists()
