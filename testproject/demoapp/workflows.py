"""The demo's tour: a workflow that fails (to try Retry and Fork), one with a concurrency
limit (to see an instance queued) that reports its progress, a schedule that fires every
minute, a partner sync whose definition the demo pauses (to try Resume), a debounced
search reindex, a carrier label whose first fetch hangs until its step timeout ends it,
and a card payment whose card number is a sensitive field (masked in the admin).

Installed by ``make demo`` only (``WORKERFLOW_DEMO=1``, see ``testproject/settings.py``).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from django.utils import timezone

from django_workerflow import WorkflowDefinition
from testproject.shop import services


class PartnerUnavailable(Exception):
    """The (simulated) invoicing partner is down; it comes back at ``partner_up_at``."""


def send_invoice(order_number: str, partner_up_at: str) -> dict:
    up_at = datetime.fromisoformat(partner_up_at)
    if timezone.now() < up_at:
        raise PartnerUnavailable(
            f"invoicing partner unavailable for {order_number}; it is back at {up_at:%H:%M:%S} UTC"
        )
    # The invoice is numbered after the order: "ORD-E69C" is invoiced as "INV-E69C".
    return {"invoice": f"INV-{order_number.removeprefix('ORD-')}"}


class InvoiceOrder(WorkflowDefinition):
    """Send an order's invoice to the invoicing partner. In the demo the partner is down for
    the first minute, so the instance fails; after that, Retry (or Fork) it in the admin."""

    name = "demo-invoice"
    version = "1"

    def execute(self) -> dict:
        number = self.input["order_number"]
        self.run("prepare", lambda: {"order": number})
        return self.run("send-invoice", lambda: send_invoice(number, self.input["partner_up_at"]))


class WarehouseHandover(WorkflowDefinition):
    """Hand a batch to a warehouse: one batch per warehouse at a time. The demo starts two for
    the same warehouse: the second waits, queued, until the first gets its event."""

    name = "demo-warehouse-handover"
    version = "1"
    max_concurrency = 1

    def concurrency_key(self) -> str:
        return self.input["warehouse"]

    def execute(self) -> dict:
        self.set_progress(0, 2, message="printing the pick list")
        self.run("pick-list", lambda: {"batch": self.input["batch"]})
        self.set_progress(1, 2, message="pick list printed; waiting for the warehouse")
        receipt = self.wait("handover", "warehouse.handed-over", timeout=timedelta(hours=1))
        self.set_progress(2, 2, message="handed over")
        return {"batch": self.input["batch"], "receipt": receipt}


class MinuteOrderCount(WorkflowDefinition):
    """Every minute, in Paris time: count the orders by status (watch the schedules page)."""

    name = "demo-minute-count"
    version = "1"
    schedule = "* * * * *"
    schedule_timezone = "Europe/Paris"

    def execute(self) -> dict:
        return self.run("count-orders", services.count_orders_by_status)


class PartnerSync(WorkflowDefinition):
    """Push an order to the shipping partner. The demo pauses this definition before starting
    two ("partner API down"): they wait, pending, until it is resumed."""

    name = "demo-partner-sync"
    version = "1"

    def execute(self) -> dict:
        return self.run("push-order", lambda: {"synced": self.input["order_number"]})


class SearchReindex(WorkflowDefinition):
    """Reindex a product after an edit. A burst of edits of one product runs it once, with the
    last edit's input: each start of the same key within 5 s puts the run off."""

    name = "demo-search-reindex"
    version = "1"
    debounce = 5

    def execute(self) -> dict:
        return self.run("reindex", lambda: {"indexed": self.input["title"]})


#: The carrier renders a label this long after it is ordered; the label step waits at most
#: LABEL_TIMEOUT for an answer, and retries LABEL_RETRY_AFTER later.
LABEL_RENDER_SECONDS = 2
LABEL_TIMEOUT = 1
LABEL_RETRY_AFTER = 3


def order_label(parcel: str) -> dict:
    ready_at = timezone.now() + timedelta(seconds=LABEL_RENDER_SECONDS)
    return {"parcel": parcel, "ready_at": ready_at.isoformat()}


def fetch_label(ordered: dict) -> dict:
    if timezone.now() < datetime.fromisoformat(ordered["ready_at"]):
        # The (simulated) carrier's bug: a request for a label it is still rendering gets
        # no answer, and its connection stays open. Only the step's timeout ends the wait.
        time.sleep(30)
    return {"label": f"https://carrier.example/labels/{ordered['parcel']}.pdf"}


class CarrierLabel(WorkflowDefinition):
    """Get a parcel's shipping label from the carrier. The carrier never answers a request
    for a label it is still rendering, which the first fetch is: its 1 s step timeout
    interrupts that attempt (StepTimeoutError), and the retry 3 s later gets the label."""

    name = "demo-carrier-label"
    version = "1"

    def execute(self) -> dict:
        ordered = self.run("order-label", lambda: order_label(self.input["parcel"]))
        return self.run(
            "fetch-label",
            lambda: fetch_label(ordered),
            timeout=LABEL_TIMEOUT,
            backoff=lambda attempt: LABEL_RETRY_AFTER,
        )


class Newsletter(WorkflowDefinition):
    """Welcome a newsletter subscriber, wait a week, then ask for feedback. A deploy renamed
    its step 'welcome' to 'send-welcome' in place, without a new version: an instance that
    recorded 'welcome' before it cannot replay on this code (its replay verdict says so), so
    the demo seeds one, to try the filter "replays on current code" and the bulk fork."""

    name = "demo-newsletter"
    version = "1"

    def execute(self) -> str:
        email = self.input["email"]
        self.run("subscribe", lambda: {"subscribed": email})
        self.run("send-welcome", lambda: {"mailed": email})
        self.sleep("wait-a-week", timedelta(days=7))
        self.run("ask-feedback", lambda: {"mailed": email})
        return "done"


class CardPayment(WorkflowDefinition):
    """Authorize a card payment. The card number (in the input and the step's value) is a
    sensitive field: the admin shows it as •••• to staff without the permission "Can view the
    sensitive payload values of instances" (the demo's ``support`` login), and in full to
    those with it (``admin``, a superuser); ``manage.py workerflow show KEY`` masks it
    unless given ``--reveal``."""

    name = "demo-card-payment"
    version = "1"
    sensitive = ["input.card.number", "steps.authorize.card_number"]

    def execute(self) -> dict:
        card = self.input["card"]
        authorization = self.run(
            "authorize",
            lambda: {
                "authorization": f"AUTH-{card['number'][-4:]}",
                "card_number": card["number"],
                "amount_cents": self.input["amount_cents"],
            },
        )
        return {"authorization": authorization["authorization"], "paid": True}
