"""Sensitive fields in a real browser (Debian's chromium through Playwright): a staff user
without ``view_sensitive_payloads`` reads ``••••`` where the card number is, in the input,
the step's value, the inbound event and the error; a user with it reads the number."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

import django_workerflow as workerflow
from django_workerflow import testing
from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.values.masking import MASK

from .console import PASSWORD, login, row
from .test_recovery_browser import operator_page

sync_api = pytest.importorskip(
    "playwright.sync_api",
    reason="playwright is not installed: run `bash .ci/install-browser .venv`",
)
expect = sync_api.expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CARD = "4000056655665556"


class Payment(WorkflowDefinition, register=False):
    """Charges the card of its input (declined once), then waits for the receipt."""

    name = "browser-payment"
    sensitive = ["input.card", "steps.charge.card", "events.receipt.card"]

    def execute(self) -> Any:
        def charge() -> dict[str, Any]:
            if self.input.get("decline"):
                raise ValueError(f"card {self.input['card']} declined")
            return {"card": self.input["card"], "amount": 42}

        self.run("charge", charge, max_attempts=3)
        return {"receipt": self.wait("receipt", "receipt")["number"]}


@pytest.fixture
def payments(workerflow_harness: Any) -> Iterator[None]:
    with testing.registered(Payment):
        workerflow.start(Payment, key="pay-1", input={"card": CARD, "holder": "Ada"})
        workerflow.start(Payment, key="pay-2", input={"card": CARD, "decline": True})
        workerflow_harness.drain()
        workerflow.send_event("pay-1", "receipt", {"card": CARD, "number": "R-1"})
        workerflow_harness.drain()
        yield


def user(name: str, *codenames: str) -> None:
    made = User.objects.create_user(name, f"{name}@example.com", PASSWORD, is_staff=True)
    made.user_permissions.set(
        Permission.objects.filter(content_type__app_label="workerflow", codename__in=codenames)
    )


@pytest.mark.parametrize("allowed", [False, True], ids=["without-permission", "with-permission"])
def test_sensitive__the_card_number_is_masked_unless_the_reader_may_see_it(
    live_server, chromium, artifacts, payments, allowed
):
    codenames = ["view_workflowinstance"] + (["view_sensitive_payloads"] if allowed else [])
    user("agent", *codenames)
    context, page = operator_page(chromium)
    try:
        login(page, live_server, "agent")
        declined = row(page, "pay-2")
        expect(declined).to_contain_text("declined")
        if allowed:
            expect(declined).to_contain_text(CARD)
        else:
            expect(declined).to_contain_text(f"card {MASK} declined")
            expect(declined).not_to_contain_text(CARD)

        row(page, "pay-1").get_by_role("link", name="pay-1").click()
        shown = CARD if allowed else MASK
        expect(page.locator("#wf-input")).to_contain_text(shown)
        expect(page.locator("#wf-input")).to_contain_text("Ada")
        expect(page.locator('tr.wf-step-row[data-step="charge"]')).to_contain_text(shown)
        expect(page.locator("#wf-inbound-events")).to_contain_text(shown)
        page.screenshot(path=str(artifacts / f"admin-sensitive-{allowed}.png"), full_page=True)
        body = page.locator("body").inner_text()
        assert (CARD in body) is allowed
        assert (MASK in body) is not allowed
    finally:
        context.close()
