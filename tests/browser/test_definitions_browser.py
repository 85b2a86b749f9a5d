"""The definitions page in a real browser (Debian's chromium through Playwright): reached from
the overview, an operator pauses a definition with a reason, the overview shows it paused,
and resuming lets its held instance run."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance

from .console import CHANGELIST, PASSWORD, login, message
from .test_recovery_browser import operator_page

sync_api = pytest.importorskip(
    "playwright.sync_api",
    reason="playwright is not installed: run `bash .ci/install-browser .venv`",
)
expect = sync_api.expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_definitions_page__pauses_with_a_reason_and_resumes(
    live_server, chromium, artifacts, define, workerflow_harness
):
    report = define(lambda self: self.run("sum", lambda: 3), name="nightly-report", version="1")
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    context, page = operator_page(chromium)
    try:
        login(page, live_server, "operator")
        page.goto(f"{live_server.url}{CHANGELIST}overview/")
        page.locator("#wf-definitions-link").click()
        expect(page.locator("#content h1")).to_contain_text("Definitions")
        row = page.locator("tr[data-definition='nightly-report']")
        row.locator("input[name=reason]").fill("partner API down")
        row.locator("input[type=submit][value=Pause]").click()

        expect(message(page)).to_contain_text("Paused definition 'nightly-report'")
        expect(page.locator("tr.wf-definition-paused")).to_contain_text("by operator")
        expect(page.locator("#wf-pause-records")).to_contain_text("partner API down")
        page.screenshot(path=str(artifacts / "admin-definitions.png"))
        assert workerflow.is_definition_paused("nightly-report")

        workerflow.start(report, key="held-report")
        workerflow_harness.drain()
        assert WorkflowInstance.objects.get(key="held-report").status == "pending"
        page.goto(f"{live_server.url}{CHANGELIST}overview/")
        expect(page.locator(".wf-paused-definition")).to_contain_text(
            re.compile(r"nightly-report is paused.*partner API down")
        )

        page.locator("#wf-definitions-link").click()
        row = page.locator("tr[data-definition='nightly-report']")
        row.locator("input[type=submit][value=Resume]").click()
        expect(message(page)).to_contain_text("Resumed definition 'nightly-report'")
        workerflow_harness.drain()
        assert WorkflowInstance.objects.get(key="held-report").status == "completed"
    finally:
        context.close()
