"""Issue 43, items 6 to 8, in Chromium: the instance page tells one story after a code change
under a running instance; the timeline after an operator's Retry draws the failure's wait for
that retry, not a retry backoff, and draws backoff and paused apart; the instance list with
32-character keys fits 1,440 px.

Screenshots go to artifacts/ (git-ignored): second-hour-*.png.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import User

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance

from .console import CHANGELIST, PASSWORD

sync_api = pytest.importorskip(
    "playwright.sync_api",
    reason="playwright is not installed: run `bash .ci/install-browser .venv`",
)
expect = sync_api.expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
WIDTH = 1440


def operator_page(chromium, live_server, *, sidebar: bool = True):
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    context = chromium.new_context(viewport={"width": WIDTH, "height": 900})
    context.set_default_timeout(15_000)
    if sidebar:
        context.add_init_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'true')")
    page = context.new_page()
    page.goto(f"{live_server.url}/admin/login/?next={CHANGELIST}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page).to_have_url(re.compile(re.escape(CHANGELIST) + "$"))
    return context, page


def change_page(page, live_server, key: str) -> None:
    pk = WorkflowInstance.objects.get(key=key).pk
    page.goto(f"{live_server.url}{CHANGELIST}{pk}/change/")


def step_row(page, step_id: str):
    return page.locator("#wf-timeline .wf-tl-row", has=page.locator(f'[title="{step_id}"]'))


@pytest.fixture
def changed_under(define, workerflow_harness):
    """'order-77' slept in 'cooling-off'; then the code changed: it no longer sleeps there
    but waits for an approval, and its alarm rang."""
    shape = {"version": 1}

    def execute(self):
        self.run("reserve", lambda: {"hold": "H-1"})
        if shape["version"] == 1:
            self.sleep("cooling-off", 20)
        return self.wait("approval", "order.approved")

    workerflow.start(define(execute, name="order"), key="order-77")
    workerflow_harness.drain()
    shape["version"] = 2
    workerflow_harness.advance(timedelta(seconds=43))
    instance = WorkflowInstance.objects.get(key="order-77")
    assert instance.unreached_step_ids == ["cooling-off"]
    return instance


def test_change_page__after_a_code_change_tells_one_story(
    live_server, chromium, artifacts, changed_under
):
    context, page = operator_page(chromium, live_server)
    try:
        change_page(page, live_server, "order-77")
        page.screenshot(path=str(artifacts / "second-hour-6-code-change.png"), full_page=True)
        waiting = page.locator("#wf-waiting-on")
        expect(waiting).to_contain_text("waiting for event 'order.approved' in step 'approval'")
        expect(waiting).not_to_contain_text("cooling-off")
        expect(page.locator("#wf-unreached")).to_contain_text("cooling-off")
        sleep = step_row(page, "cooling-off")
        expect(sleep.locator(".wf-tl-summary")).to_have_text(
            "no longer reached (the definition changed)"
        )
        kinds = sleep.locator(".wf-seg").evaluate_all("ss => ss.map(s => s.className)")
        steps_table = page.locator('#wf-steps tr[data-step="cooling-off"]')
        assert kinds == ["wf-seg wf-seg-sleep-unreached"]
        expect(steps_table.first).to_contain_text("No longer reached")
        expect(steps_table.first).not_to_contain_text("Sleeping")
    finally:
        context.close()


@pytest.fixture
def retried(define, workerflow_harness):
    """'invoice-9' failed its two attempts (30 s backoff), waited 10 minutes failed, was
    retried by an operator, then was paused and resumed."""
    partner = {"up": False}

    def send():
        if not partner["up"]:
            raise ConnectionError("partner down")
        return {"sent": True}

    def execute(self):
        self.run("send-invoice", send, max_attempts=2, backoff=lambda n: 30)
        self.sleep("settle", 60)

    workerflow.start(define(execute, name="invoice"), key="invoice-9")
    workerflow_harness.drain()
    workerflow_harness.advance(timedelta(seconds=31))
    assert WorkflowInstance.objects.get(key="invoice-9").status == "failed"
    workerflow_harness.advance(timedelta(minutes=10))
    partner["up"] = True
    workerflow.retry("invoice-9", reason="partner is back")
    workerflow_harness.drain()
    workerflow.pause("invoice-9")
    workerflow_harness.advance(timedelta(minutes=2))
    workerflow.resume("invoice-9")
    workerflow_harness.drain()
    return WorkflowInstance.objects.get(key="invoice-9")


def test_timeline__after_a_retry_draws_the_wait_for_it_and_backoff_apart_from_paused(
    live_server, chromium, artifacts, retried
):
    context, page = operator_page(chromium, live_server)
    try:
        change_page(page, live_server, "invoice-9")
        send = step_row(page, "send-invoice")
        page.locator("#wf-timeline").scroll_into_view_if_needed()
        page.locator("#wf-timeline").screenshot(path=str(artifacts / "second-hour-7-retry.png"))
        segments = send.locator(".wf-seg").evaluate_all(
            "ss => ss.map(s => [s.className.replace('wf-seg wf-seg-', ''), s.title,"
            " s.getBoundingClientRect().width])"
        )
        legend = page.evaluate(
            """(() => Object.fromEntries(['backoff', 'paused', 'awaiting-retry'].map(kind => [
                kind,
                getComputedStyle(document.querySelector('.wf-legend .wf-seg-' + kind))
                  .backgroundImage.match(/rgb\\([^)]*\\)/g),
            ])))()"""
        )
    finally:
        context.close()
    kinds = [kind for kind, _title, _width in segments]
    assert kinds == [
        "attempt-failed",
        "backoff",
        "attempt-failed",
        "awaiting-retry",
        "attempt-succeeded",
    ], segments
    backoff, waiting = segments[1], segments[3]
    assert backoff[1].startswith("backoff ")
    assert waiting[1].startswith("failed, waiting for an operator's retry ")
    assert "(10 min" in waiting[1]
    assert waiting[2] > 5 * backoff[2]  # 10 minutes against 30 s, to scale
    # Paused and retry backoff: neither their stripes' colours nor their pale ones are close.
    assert _distance(legend["backoff"][0], legend["paused"][0]) > 100, legend
    assert _distance(legend["backoff"][-1], legend["paused"][-1]) > 40, legend
    assert _distance(legend["awaiting-retry"][0], legend["backoff"][0]) > 60, legend


def _distance(first: str, second: str) -> float:
    a, b = (tuple(int(n) for n in re.findall(r"\d+", rgb)) for rgb in (first, second))
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) ** 0.5


@pytest.fixture
def task_ids(define, workerflow_harness):
    """A page of instances keyed by 32-character task ids, as the tasks backend keys them."""
    definition = define(
        lambda self: self.wait("reply", "customer.replied", timeout=timedelta(days=2)),
        name="django_tasks.send_welcome_email",
    )
    for _ in range(8):
        workerflow.start(definition, key=uuid.uuid4().hex)
    workerflow_harness.drain()


@pytest.mark.parametrize("sidebar", [True, False], ids=["sidebar", "no-sidebar"])
def test_change_list__fits_1440_px_with_32_character_keys(
    live_server, chromium, artifacts, task_ids, sidebar
):
    context, page = operator_page(chromium, live_server, sidebar=sidebar)
    try:
        expect(page.locator("#result_list tbody tr")).to_have_count(8)
        clipped = page.evaluate(
            """(() => {
              const box = document.querySelector('#changelist .results').getBoundingClientRect();
              return [...document.querySelectorAll('#result_list thead th')]
                .filter(th => th.getBoundingClientRect().right > box.right + 0.5)
                .map(th => th.textContent.trim());
            })()"""
        )
        scroll = page.evaluate(
            "(() => { const e = document.querySelector('#changelist .results');"
            " return [e.scrollWidth, e.clientWidth]; })()"
        )
        # The key link's line boxes: one per line it wraps onto.
        key_lines = page.locator("#result_list tbody th.field-key_column a").first.evaluate(
            "e => e.getClientRects().length"
        )
        name = "sidebar" if sidebar else "no-sidebar"
        page.screenshot(path=str(artifacts / f"second-hour-8-list-1440-{name}.png"))
    finally:
        context.close()
    assert clipped == [], clipped
    assert scroll[0] <= scroll[1], scroll
    assert key_lines <= 2  # a key wraps once at most
