"""The overview page in a real browser (Debian's chromium through Playwright): reached from
the instance list, it draws a chart per definition and its counts open the filtered list.
With WORKERFLOW_DOCS_SCREENSHOTS=1, docs/images/admin-overview.png (the viewport) is written
again."""

from __future__ import annotations

import os
import re

import pytest
from django.contrib.auth.models import User

import django_workerflow as workerflow

from .test_recovery_browser import DOCS_IMAGES, PASSWORD, login, operator_page

sync_api = pytest.importorskip(
    "playwright.sync_api",
    reason="playwright is not installed: run `bash .ci/install-browser .venv`",
)
expect = sync_api.expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _fail(self):
    def charge():
        raise RuntimeError("card declined")

    return self.run("charge", charge, max_attempts=1)


@pytest.fixture
def busy(define, workerflow_harness):
    report = define(lambda self: self.run("sum", lambda: 3), name="nightly-report", version="1")
    shop = define(_fail, name="checkout", version="1")
    onboarding = define(lambda self: self.wait("w", "signed"), name="onboarding", version="1")
    for hour in range(6):
        for n in range(hour + 2):
            workerflow.start(report, key=f"report-{hour}-{n}")
        workerflow.start(shop, key=f"checkout-{hour}")
        workerflow.start(onboarding, key=f"onboarding-{hour}")
        workerflow_harness.drain()
        workerflow_harness.advance(3600)
    return workerflow_harness


def test_overview__reached_from_the_list__draws_charts_and_links_counts(
    live_server, chromium, artifacts, busy
):
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    context, page = operator_page(chromium)
    try:
        login(page, live_server, "operator")
        page.locator("#wf-overview-link").click()
        expect(page.locator("#content h1")).to_contain_text("Overview")
        # Django's own breadcrumbs for the version: an <ol> from 6.0, a <div> before.
        expect(page.locator(".breadcrumbs")).to_have_text(
            re.compile(r"Home\W*Workflows\W*Overview")
        )
        expect(page.locator("svg.wf-chart")).to_have_count(3)
        expect(page.locator("#wf-definitions")).to_contain_text("nightly-report")
        page.screenshot(path=str(artifacts / "admin-overview.png"))
        if os.environ.get("WORKERFLOW_DOCS_SCREENSHOTS"):
            page.screenshot(path=str(DOCS_IMAGES / "admin-overview.png"))
        completed = page.locator("#wf-definitions tr", has_text="nightly-report").locator(
            "td.wf-count-completed a"
        )
        expect(completed).to_have_text("27")
        completed.click()
        expect(page.locator("#result_list tbody tr")).to_have_count(27)
    finally:
        context.close()
