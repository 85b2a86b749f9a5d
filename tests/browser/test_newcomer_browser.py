"""What a newcomer sees in Chromium at 1,366 px with the sidebar open: the instance list
fits; the confirmation pages (retry, fork, send event, cancel) and a schedule's page look like
Django's own pages of this version (breadcrumbs, buttons, fields); a child step's timeline row
has a bar; a forked instance says "forked to"; a queued one names its concurrency key; the
schedules page lists recent instances; what `make demo` seeds reads right in the list, its
failed invoice completes after a Retry, and its paused partner sync shows on the Definitions
page, whose Resume lets its held instances complete.

With WORKERFLOW_DOCS_SCREENSHOTS=1 the pictures docs/images/newcomer-*-django<N>.png are
written (N: this Django's major version), one viewport each.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import django
import pytest
from django.contrib.auth.models import User

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance
from django_workerflow.testing import Harness
from testproject import demo

sync_api = pytest.importorskip(
    "playwright.sync_api",
    reason="playwright is not installed: run `bash .ci/install-browser .venv`",
)
expect = sync_api.expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"
CHANGELIST = "/admin/workerflow/workflowinstance/"
SCHEDULES = "/admin/workerflow/workflowschedule/"
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
WIDTH, HEIGHT = 1366, 900
DJANGO = f"django{django.VERSION[0]}"


def docs_screenshot(target, name: str) -> None:
    """docs/images/newcomer-<name>-django<N>.png (WORKERFLOW_DOCS_SCREENSHOTS=1): the
    viewport, or one element, never a whole long page."""
    if os.environ.get("WORKERFLOW_DOCS_SCREENSHOTS"):
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        target.screenshot(path=str(DOCS_IMAGES / f"newcomer-{name}-{DJANGO}.png"))


@pytest.fixture
def console(define, define_with, workerflow_harness):
    """A failed invoice, another failed and forked, an order waiting on two child workflows
    (one failed, one completed), two handovers behind a limit of one per warehouse, a
    Paris schedule that ran twice, and an order waiting for its payment."""
    harness = workerflow_harness

    def invoice(self):
        self.run("fetch-order", lambda: {"total": 49.9})
        self.run("send-invoice", _partner_down, max_attempts=2, backoff=lambda n: 30)

    invoices = define(invoice, name="invoice")
    workerflow.start(invoices, key="invoice-7")
    workerflow.start(invoices, key="invoice-8")

    def parcel(self):
        self.sleep("pick-up", 2)
        if self.input["parcel"] == 2:
            raise RuntimeError("carrier rejected parcel 2: address incomplete")
        return {"tracking": f"TRK-{self.input['parcel']}"}

    parcels = define(parcel, name="parcel-shipment")

    def order(self):
        self.run("reserve-stock", lambda: {"reserved": True})
        self.all_settled(
            *[
                lambda n=n: self.child(f"ship-parcel-{n}", parcels, input={"parcel": n})
                for n in (1, 2)
            ]
        )
        return {"parcels": 2}

    workerflow.start(define(order, name="multi-parcel-order"), key="order-PAR-1")

    def checkout(self):
        self.run("reserve", lambda: {"hold": "H-17"})
        return self.wait("await-payment", "payment.received", timeout=timedelta(days=2))

    workerflow.start(define(checkout, name="order-fulfillment"), key="order-1001")
    handover = define_with(
        lambda self: self.wait("handover", "warehouse.handed-over"),
        name="warehouse-handover",
        max_concurrency=1,
        concurrency_key=lambda self: self.input["warehouse"],
    )
    for turn in ("first", "second"):
        workerflow.start(handover, key=f"handover-{turn}", input={"warehouse": "paris-1"})
    harness.drain()
    harness.advance(60)  # the invoices' retries fail too; the parcels' pick-ups pass
    workerflow.fork("invoice-8", key="invoice-8~1", reason="partner fixed")
    harness.drain()
    return harness


def _partner_down():
    raise ConnectionError("invoicing partner unavailable: api.partner.example refused")


@pytest.fixture
def scheduled(define_with, workerflow_harness):
    """'nightly-report' at 03:00 Paris time, which ran on two nights."""
    definition = define_with(
        lambda self: self.run("count", lambda: {"orders": 3}),
        name="nightly-report",
        schedule="0 3 * * *",
        schedule_timezone="Europe/Paris",
    )
    start = datetime.now(UTC) - timedelta(days=2)
    with Harness(start=start, schedules=["nightly-report"]) as harness:
        harness.advance(timedelta(days=2))
    return definition


def operator_page(chromium, live_server):
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    context = chromium.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    context.set_default_timeout(15_000)
    context.add_init_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'true')")
    page = context.new_page()
    page.goto(f"{live_server.url}/admin/login/?next={CHANGELIST}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page).to_have_url(re.compile(re.escape(CHANGELIST) + "$"))
    expect(page.locator("#nav-sidebar")).to_be_visible()
    return context, page


def row(page, key: str):
    """The instance list's row of the instance with this key."""
    return page.locator("#result_list tbody tr", has=page.get_by_role("link", name=key, exact=True))


def change_page(page, live_server, key: str) -> None:
    pk = WorkflowInstance.objects.get(key=key).pk
    page.goto(f"{live_server.url}{CHANGELIST}{pk}/change/")


def overflow(page, selector: str) -> list[int]:
    """[scrollWidth, clientWidth] of the element: equal when nothing is clipped."""
    return page.evaluate(
        "s => { const e = document.querySelector(s); return [e.scrollWidth, e.clientWidth]; }",
        selector,
    )


def test_change_list__fits_1366_px_with_the_sidebar_open(live_server, chromium, console, scheduled):
    context, page = operator_page(chromium, live_server)
    try:
        expect(page.locator("#result_list tbody tr")).to_have_count(
            WorkflowInstance.objects.count()
        )
        expect(page.locator("#result_list")).to_contain_text("queued behind 'paris-1'")
        document = page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        results = overflow(page, "#changelist .results")
        # Every header, CREATED / UPDATED and NEXT ALARM included, ends inside the list.
        headers = page.evaluate(
            """(() => {
              const box = document.querySelector('#changelist .results').getBoundingClientRect();
              return [...document.querySelectorAll('#result_list thead th')]
                .filter(th => th.getBoundingClientRect().right > box.right + 0.5)
                .map(th => th.textContent.trim());
            })()"""
        )
        # "waiting on" wraps between words only.
        wraps = page.evaluate(
            "[...document.querySelectorAll('#result_list td.field-waiting_on')]"
            ".map(td => getComputedStyle(td).overflowWrap)"
        )
        columns = page.evaluate(
            "[...document.querySelectorAll('#result_list thead th')]"
            ".map(th => [th.className, Math.round(th.getBoundingClientRect().width)])"
        )
        docs_screenshot(page, "change-list-1366")
        assert document[0] <= document[1] == WIDTH, document
        assert results[0] <= results[1], (results, columns)
        assert headers == []
        assert set(wraps) == {"break-word"}
    finally:
        context.close()


FORMS = {
    # name: (key, the page's path after the instance, what its submit button says)
    "retry": ("invoice-7", "retry/", "Yes, retry"),
    "fork": ("invoice-7", "fork/", "Fork"),
    "send-event": ("order-1001", "send_event/", "Send event"),
    "cancel": ("order-1001", "cancel/", "Yes, cancel"),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_confirmation_page__looks_like_djangos_own(live_server, chromium, console, form):
    key, path, submit_label = FORMS[form]
    context, page = operator_page(chromium, live_server)
    try:
        pk = WorkflowInstance.objects.get(key=key).pk
        page.goto(f"{live_server.url}{CHANGELIST}{pk}/{path}")
        crumbs = page.locator(".breadcrumbs").first
        expect(crumbs).to_contain_text(key)
        tag = crumbs.evaluate("e => e.tagName")
        style = crumbs.evaluate(
            "e => { const s = getComputedStyle(e);"
            " return [s.backgroundColor, parseFloat(s.paddingLeft)]; }"
        )
        submit = page.get_by_role("button", name=submit_label).bounding_box()
        back = page.get_by_role("link", name="No, take me back")
        back_box = back.bounding_box()
        text_box = back.evaluate(
            "e => { const r = document.createRange(); r.selectNodeContents(e);"
            " const b = r.getBoundingClientRect(); return {y: b.y, height: b.height}; }"
        )
        docs_screenshot(page, f"{form}-form")
        assert tag == ("OL" if django.VERSION >= (6, 0) else "DIV")
        assert style[0] not in ("rgba(0, 0, 0, 0)", "transparent"), "breadcrumbs unstyled"
        assert style[1] >= 20, "breadcrumbs at the left edge"
        # Side by side, the same height, and the link's words in the middle of its box.
        assert abs(submit["y"] - back_box["y"]) <= 1
        assert abs(submit["height"] - back_box["height"]) <= 1
        centre = back_box["y"] + back_box["height"] / 2
        assert abs(text_box["y"] + text_box["height"] / 2 - centre) <= 2
    finally:
        context.close()


def test_change_page__a_child_steps_row_is_described_and_drawn(live_server, chromium, console):
    context, page = operator_page(chromium, live_server)
    try:
        change_page(page, live_server, "order-PAR-1")
        timeline = page.locator("#wf-timeline")
        failed = timeline.locator(".wf-tl-row", has=page.locator('[title="ship-parcel-2"]'))
        expect(failed.locator(".wf-tl-summary")).to_contain_text("child workflow failed after")
        expect(failed.locator(".wf-tl-summary")).not_to_contain_text("attempt")
        done = timeline.locator(".wf-tl-row", has=page.locator('[title="ship-parcel-1"]'))
        expect(done.locator(".wf-tl-summary")).to_contain_text("child workflow completed after")
        bar = done.locator(".wf-seg").first
        colour = bar.evaluate("e => getComputedStyle(e).backgroundColor")
        assert colour not in ("rgba(0, 0, 0, 0)", "transparent")
        assert bar.bounding_box()["width"] > 100
        # The step events are folded, one group per step.
        groups = page.locator("#wf-step-events details.wf-step-events")
        expect(groups).to_have_count(3)  # reserve-stock and the two child steps
        assert groups.evaluate_all("ds => ds.filter(d => d.open).length") == 0
        timeline.scroll_into_view_if_needed()
        docs_screenshot(timeline, "timeline-child-rows")
        page.locator("#wf-step-events").scroll_into_view_if_needed()
        docs_screenshot(page.locator("#wf-step-events"), "step-events-folded")
    finally:
        context.close()


def test_console__a_forked_instance_says_forked_to_and_a_queued_one_its_key(
    live_server, chromium, console
):
    context, page = operator_page(chromium, live_server)
    try:
        source = page.locator(
            "#result_list tbody tr", has=page.get_by_role("link", name="invoice-8", exact=True)
        )
        expect(source.first).to_contain_text("forked to 'invoice-8~1'")
        change_page(page, live_server, "invoice-8")
        expect(page.locator("#wf-forked-to")).to_contain_text("forked to invoice-8~1")
        docs_screenshot(page.locator("#wf-summary"), "forked-to")
        change_page(page, live_server, "handover-second")
        expect(page.locator("#wf-waiting-on")).to_contain_text(
            "queued behind 'paris-1': 1 of 1 slots in use"
        )
        docs_screenshot(page.locator("#wf-summary"), "queued-behind")
    finally:
        context.close()


def test_schedules_page__shows_recent_instances_and_both_zones(
    live_server, chromium, console, scheduled
):
    context, page = operator_page(chromium, live_server)
    try:
        page.goto(f"{live_server.url}{SCHEDULES}")
        name = page.get_by_role("link", name="nightly-report", exact=True)
        row = page.locator("#result_list tbody tr", has=name)
        expect(row.locator(".field-recent_runs li")).to_have_count(2)
        expect(row.locator(".field-recent_runs .wf-badge").first).to_have_text("Completed")
        expect(row.locator(".field-next_run")).to_contain_text("UTC")
        expect(row.locator(".field-next_run")).to_contain_text(re.compile(r"CES?T"))
        results = overflow(page, "#changelist .results")
        docs_screenshot(page, "schedules")
        assert results[0] <= results[1], results
        row.get_by_role("link", name="All its instances").click()
        expect(page.locator("#result_list tbody tr")).to_have_count(2)
    finally:
        context.close()


def test_schedule_change_page__looks_like_djangos_own(live_server, chromium, scheduled):
    """A schedule's page is Django's read-only change form: the same breadcrumbs, heading,
    fieldset and rows as a page Django draws alone (a user's page), on this version."""
    context, page = operator_page(chromium, live_server)
    try:
        parts = {
            "breadcrumbs": ".breadcrumbs",
            "heading": "#content h1",
            "fieldset": "#content-main fieldset.module",
            "row": "#content-main fieldset.module .form-row",
            "label": "#content-main fieldset.module .form-row label:not(.required)",
        }
        looks = (
            "sel => Object.fromEntries(Object.entries(sel).map(([name, s]) => {"
            " const e = document.querySelector(s); const c = getComputedStyle(e);"
            " return [name, [e.tagName, c.backgroundColor, c.color, c.fontSize, c.fontWeight,"
            " c.paddingLeft, c.paddingTop, c.marginLeft, c.borderBottomWidth,"
            " Math.round(e.getBoundingClientRect().left)]]; }))"
        )
        operator = User.objects.get(username="operator").pk
        page.goto(f"{live_server.url}/admin/auth/user/{operator}/change/")
        djangos = page.evaluate(looks, parts)
        page.goto(f"{live_server.url}{SCHEDULES}")
        page.get_by_role("link", name="nightly-report", exact=True).click()
        expect(page.locator("#content h1")).to_have_text("View workflow schedule")
        expect(page.locator(".breadcrumbs")).to_contain_text("nightly-report")
        ours = page.evaluate(looks, parts)
        recent = page.locator(".field-recent_runs")
        expect(recent.locator("li")).to_have_count(2)
        expect(recent.locator(".wf-badge").first).to_have_text("Completed")
        expect(page.locator(".field-next_run")).to_contain_text("UTC")
        expect(page.locator(".field-next_run")).to_contain_text(re.compile(r"CES?T"))
        document = page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        # The recent instances start where every other value does, not indented as
        # Django indents a form's own lists.
        lefts = page.evaluate(
            "['.field-name .readonly', '.field-recent_runs .readonly',"
            " '.field-recent_runs ul.wf-recent-runs', '.field-recent_runs li']"
            ".map(s => Math.round(document.querySelector(s).getBoundingClientRect().left))"
        )
        docs_screenshot(page, "schedule-change-page")
        assert ours["breadcrumbs"][0] == ("OL" if django.VERSION >= (6, 0) else "DIV")
        assert ours == djangos
        assert len(set(lefts)) == 1, lefts
        assert document[0] <= document[1], document
    finally:
        context.close()


@pytest.fixture
def demo_seeded(demo_tour, monkeypatch):
    """What `make demo` seeds, and its worker's first minute, run by the harness: the
    example orders; the invoice failed (its partner is down for a minute), two handovers
    (one showing its progress, one queued), two partner syncs held by their paused
    definition, the debounced reindex completed, the carrier label completed on its retry
    (its first fetch timed out); the minute schedule fired once. Yields the harness and the
    tour's keys.

    The clock starts 10 s past a minute, so that the 61 s walked cross one minute
    boundary: from the wall clock's second 59 they crossed two, and the schedule fired
    twice."""
    now = datetime.now(UTC)
    start = now.replace(second=10, microsecond=0)
    if start > now:
        start -= timedelta(minutes=1)
    with Harness(start=start, schedules=[demo.SCHEDULE]) as harness:
        # The partner's clock is the wall clock (user code); here, the harness's.
        monkeypatch.setattr(demo_tour.timezone, "now", harness.now)
        demo.place_example_orders()
        tour = demo.start_tour()
        harness.drain()
        harness.advance(61)  # the invoice's retries fail; the schedule fires; the partner is back
        yield harness, tour


def test_demo__the_list_shows_the_tour_and_a_retry_completes_the_invoice(
    live_server, chromium, demo_seeded
):
    harness, tour = demo_seeded
    context, page = operator_page(chromium, live_server)
    try:
        page.goto(f"{live_server.url}{CHANGELIST}?level=top")
        expect(row(page, tour.failed).locator(".wf-badge")).to_have_text("Failed")
        expect(row(page, tour.failed)).to_contain_text("PartnerUnavailable")
        expect(row(page, tour.queued)).to_contain_text("queued behind 'paris-1'")
        bar = row(page, tour.first).locator(".wf-progress")
        expect(bar).to_have_attribute("aria-valuenow", "50.0")
        expect(row(page, tour.first)).to_contain_text("50% (1 of 2)")
        scheduled = page.locator("#result_list tbody tr", has_text=f"{demo.SCHEDULE}@")
        expect(scheduled.locator(".wf-badge")).to_have_text("Completed")
        expect(bar).to_be_in_viewport()
        docs_screenshot(page, "demo-list")

        row(page, tour.failed).get_by_role("link", name=tour.failed, exact=True).click()
        page.locator("#wf-controls").get_by_role("link", name="Retry").click()
        page.fill("#id_reason", "the partner is back")
        page.get_by_role("button", name="Yes, retry").click()
        expect(page.locator("#wf-summary .wf-badge")).to_have_text("Running")
        harness.drain()
        page.reload()
        expect(page.locator("#wf-summary .wf-badge")).to_have_text("Completed")
        invoice = tour.failed.replace("invoice-", "INV-")  # not "INV-INV-" (issue 43)
        expect(page.locator("#wf-result")).to_contain_text(f'"invoice": "{invoice}"')
        docs_screenshot(page, "demo-retried")
    finally:
        context.close()


def test_demo__the_overview_counts_the_tour(live_server, chromium, demo_seeded):
    """The overview over what `make demo` seeds: the failed invoice, the queued handover
    behind its gate, the minute schedule; its counts open the list they count."""
    _, tour = demo_seeded
    context, page = operator_page(chromium, live_server)
    try:
        page.goto(f"{live_server.url}{CHANGELIST}")
        page.locator("#wf-overview-link").click()
        expect(page.locator("#content h1")).to_contain_text("Overview")
        invoices = page.locator("#wf-definitions tr", has_text="demo-invoice")
        expect(invoices.locator("td.wf-count-failed a")).to_have_text("1")
        gate = page.locator("#wf-gates tr", has_text="paris-1")
        expect(gate.locator("a")).to_have_text("1")
        expect(page.locator("#wf-schedules")).to_contain_text(demo.SCHEDULE)
        docs_screenshot(page, "demo-overview")
        gate.locator("a").click()
        expect(page.locator("#result_list tbody tr")).to_have_count(1)
        expect(page.locator("#result_list")).to_contain_text(tour.queued)
    finally:
        context.close()


def test_demo__the_carrier_labels_page_shows_its_timed_out_attempt_then_the_retry(
    live_server, chromium, demo_seeded
):
    """The demo's step timeout, where its banner points: the label's page, whose fetch step
    lists its first attempt failed with StepTimeoutError and its second one's success."""
    _, tour = demo_seeded
    context, page = operator_page(chromium, live_server)
    try:
        change_page(page, live_server, tour.timed_out)
        expect(page.locator("#wf-summary .wf-badge")).to_have_text("Completed")
        fetch = page.locator('tr[data-step="fetch-label"]')
        expect(fetch).to_contain_text("2 of 3")
        fetch.locator("details.wf-attempts summary").click()
        attempts = fetch.locator("ol li")
        expect(attempts).to_have_count(2)
        expect(attempts.first).to_contain_text(
            "StepTimeoutError: Run step 'fetch-label' ran longer than its timeout of 1 s"
        )
    finally:
        context.close()


def test_demo__the_paused_partner_sync_is_listed_then_resumed_and_its_syncs_complete(
    live_server, chromium, demo_seeded
):
    """The demo's paused definition, as its banner says to find it: on the overview's
    warning and on the Definitions page (who paused it and why); its Resume button lets the
    held syncs run."""
    harness, tour = demo_seeded
    context, page = operator_page(chromium, live_server)
    try:
        for key in tour.held:
            expect(row(page, key).locator(".wf-badge")).to_have_text("Pending")
        page.locator("#wf-overview-link").click()
        expect(page.locator(".wf-paused-definition")).to_contain_text(f"{demo.PAUSED} is paused")
        page.locator("#wf-definitions-link").click()
        paused = page.locator(f"tr[data-definition='{demo.PAUSED}']")
        expect(paused).to_have_class(re.compile(r"\bwf-definition-paused\b"))
        expect(paused).to_contain_text(f"by demo: {demo.PAUSE_REASON}")
        docs_screenshot(page, "demo-definitions")
        paused.get_by_role("button", name="Resume").click()
        expect(page.locator("ul.messagelist li")).to_contain_text(
            f"Resumed definition '{demo.PAUSED}'"
        )
        expect(page.locator(f"tr[data-definition='{demo.PAUSED}']")).not_to_have_class(
            re.compile(r"\bwf-definition-paused\b")
        )
        harness.drain()
        page.goto(f"{live_server.url}{CHANGELIST}?level=top")
        for key in tour.held:
            expect(row(page, key).locator(".wf-badge")).to_have_text("Completed")
    finally:
        context.close()
