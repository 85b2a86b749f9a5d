"""The shop's workflows; django-workerflow imports this module when Django starts."""

from __future__ import annotations

from datetime import timedelta

from django_workerflow import Outcome, WaitStepTimedOutError, WorkflowDefinition

from . import services


class OrderFulfillment(WorkflowDefinition):
    """Take an order from checkout to shipment.

    Every side effect is a step; the waits are for events the rest of the site sends: the
    payment (from a post_save signal on Payment) and a manager's approval (from the admin's
    "send event" action, or ``manage.py workerflow send-event``).
    """

    name = "order-fulfillment"
    version = "1"
    # The admin's list filters by these attributes (the start gives the customer and the
    # region; execute() sets the stage).
    attribute_filters = ["customer", "region", "stage"]

    def execute(self) -> dict:
        order_id = self.input["order_id"]
        self.set_attributes(stage="awaiting payment")
        self.run("reserve-stock", lambda: services.reserve_stock(order_id))
        try:
            payment = self.wait("payment", "payment.received", timeout=timedelta(days=2))
        except WaitStepTimedOutError:
            self.set_attributes(stage="cancelled unpaid")
            self.run("cancel-unpaid", lambda: services.mark_cancelled(order_id, "unpaid"))
            return {"status": "cancelled", "reason": "no payment within two days"}
        charge = self.run(
            "charge", lambda: services.capture_payment(order_id, payment), max_attempts=5
        )
        self.set_attributes(stage="charged")
        # A short cooling-off period in which the customer may still cancel.
        self.sleep("cooling-off", timedelta(seconds=20))
        approval = self.wait("approval", "order.approved", timeout=timedelta(hours=1))
        shipment = self.run("ship", lambda: services.create_shipment(order_id), atomic=True)
        self.set_attributes(stage="shipped")
        return {"charge": charge, "approved_by": approval.get("by"), **shipment}


class ParcelShipment(WorkflowDefinition):
    """Ship one parcel: book the carrier, then wait for its pick-up (a short sleep here)."""

    name = "parcel-shipment"
    version = "1"

    def execute(self) -> dict:
        order_id, parcel = self.input["order_id"], self.input["parcel"]
        booking = self.run(
            "book-carrier", lambda: services.book_parcel(order_id, parcel), max_attempts=5
        )
        self.sleep("pick-up", timedelta(seconds=5))
        return booking


class MultiParcelOrder(WorkflowDefinition):
    """An order shipped as several parcels: one child shipment workflow per parcel, run
    concurrently; the order completes once every parcel has shipped, and the customer hears
    of it exactly as the order ended (``on_finish``, delivered at least once)."""

    name = "multi-parcel-order"
    version = "1"

    def execute(self) -> dict:
        order_id = self.input["order_id"]
        self.run("reserve-stock", lambda: services.reserve_stock(order_id))
        shipments = self.all(
            *[
                lambda parcel=parcel: self.child(
                    f"ship-parcel-{parcel}",
                    ParcelShipment,
                    input={"order_id": order_id, "parcel": parcel},
                )
                for parcel in range(1, self.input["parcels"] + 1)
            ]
        )
        self.run("mark-shipped", lambda: services.mark_shipped(order_id))
        return {"parcels": shipments}

    def on_finish(self, outcome: Outcome) -> None:
        text = f"Order {self.key}: {outcome.status}"
        if outcome.status == "completed":
            text += f", {len(outcome.result['parcels'])} parcels on their way"
        services.notify_customer(self.input["order_id"], outcome.id, text)


class NightlyOrderReport(WorkflowDefinition):
    """Every night at 03:00 Paris time: count the orders by status.

    The engine starts one instance per night with the key
    ``shop-nightly-report@<occurrence in UTC>`` and the input ``{"scheduled_at": ...}``.
    """

    name = "shop-nightly-report"
    version = "1"
    schedule = "0 3 * * *"
    schedule_timezone = "Europe/Paris"

    def execute(self) -> dict:
        counts = self.run("count-orders", services.count_orders_by_status)
        return {"scheduled_at": self.input["scheduled_at"], "orders_by_status": counts}


class CustomerExport(WorkflowDefinition):
    """Export a customer's orders to the accounting partner: one export per customer at a
    time, at most three a second per customer. More starts wait, queued, until admitted."""

    name = "shop-customer-export"
    version = "1"
    max_concurrency = 1
    rate_limit = (3, timedelta(seconds=1))

    def concurrency_key(self) -> str:
        return self.input["email"]

    def execute(self) -> dict:
        return self.run("export", lambda: services.export_customer_orders(self.input["email"]))
