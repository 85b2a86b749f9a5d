"""Progress in a real browser (Debian's chromium through Playwright): the change list draws
a bar under each reporting instance's status and still fits 1,280 px; the change page draws
it under "Progress". With WORKERFLOW_DOCS_SCREENSHOTS=1, docs/images/admin-progress-bar.png
(a viewport-sized picture of the change page) is written again."""

from __future__ import annotations

import os

import pytest
from django.contrib.auth.models import User

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance

from .test_recovery_browser import DOCS_IMAGES, PASSWORD, login, operator_page, row

sync_api = pytest.importorskip(
    "playwright.sync_api",
    reason="playwright is not installed: run `bash .ci/install-browser .venv`",
)
expect = sync_api.expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def import_rows(self):
    """An import of 40,000 rows in batches of 4,000; it has done seven."""
    for number in range(7):
        self.set_progress(number * 4_000, 40_000, message=f"importing batch {number + 1} of 10")
        self.run(f"batch-{number}", lambda number=number: {"rows": 4_000, "batch": number})
    self.set_progress(28_000, 40_000, message="importing batch 8 of 10: orders-2026-08.csv")
    return self.wait("batch-7", "batch.done")


@pytest.fixture
def importing(define, workerflow_harness):
    definition = define(import_rows, name="import-orders", version="1")
    workerflow.start(definition, key="import-2026", input={"file": "orders-2026.csv"})
    workerflow.start(define(lambda self: self.wait("w", "never"), name="quiet"), key="quiet-1")
    workerflow_harness.drain()
    return workerflow_harness


def test_progress__the_list_and_the_change_page_draw_the_bar(
    live_server, chromium, artifacts, importing
):
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    context, page = operator_page(chromium)
    try:
        login(page, live_server, "operator")
        bar = row(page, "import-2026").locator(".wf-progress")
        expect(bar).to_have_attribute("aria-valuenow", "70.0")
        expect(row(page, "import-2026")).to_contain_text("70% (28,000 of 40,000)")
        expect(row(page, "quiet-1").locator(".wf-progress")).to_have_count(0)
        fill = bar.locator(".wf-progress-fill").bounding_box()
        whole = bar.bounding_box()
        assert fill is not None
        assert whole is not None
        assert 0.6 < fill["width"] / whole["width"] < 0.8
        widths = page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        page.screenshot(path=str(artifacts / "admin-progress-list.png"), full_page=True)
        assert widths[0] <= widths[1], widths

        row(page, "import-2026").get_by_role("link", name="import-2026").click()
        progress = page.locator("#wf-progress")
        expect(progress).to_contain_text("Progress")
        expect(progress).to_contain_text("70% (28,000 of 40,000): importing batch 8 of 10")
        expect(progress.locator(".wf-progress-fill")).to_be_visible()
        page.screenshot(path=str(artifacts / "admin-progress-bar.png"))
        if os.environ.get("WORKERFLOW_DOCS_SCREENSHOTS"):
            page.screenshot(path=str(DOCS_IMAGES / "admin-progress-bar.png"))
        assert WorkflowInstance.objects.get(key="import-2026").progress.fraction == 0.7
    finally:
        context.close()
