"""What the order workflow's steps do. Plain functions: a workflow step just calls them."""

from __future__ import annotations

from django.db.models import F

from .models import Order, Shipment


class PaymentGatewayTimeout(Exception):
    """The (simulated) payment provider did not answer in time; worth a retry."""


def reserve_stock(order_id: int) -> dict:
    Order.objects.filter(pk=order_id).update(status="reserved")
    return {"reserved": True}


def capture_payment(order_id: int, payment: dict) -> dict:
    """Capture the payment. The simulated gateway times out on the first try of every order,
    so the demo shows a retry."""
    Order.objects.filter(pk=order_id).update(capture_attempts=F("capture_attempts") + 1)
    order = Order.objects.get(pk=order_id)
    if order.capture_attempts == 1:
        raise PaymentGatewayTimeout(f"gateway did not answer for order {order.number}")
    Order.objects.filter(pk=order_id).update(status="paid")
    return {"captured_cents": payment["amount_cents"], "reference": payment["reference"]}


def create_shipment(order_id: int) -> dict:
    """Runs as an atomic step: the shipment row commits together with the step's result."""
    order = Order.objects.get(pk=order_id)
    shipment = Shipment.objects.create(order=order, tracking_number=f"TRK-{order.number}")
    Order.objects.filter(pk=order_id).update(status="shipped")
    return {"tracking_number": shipment.tracking_number}


def mark_cancelled(order_id: int, reason: str) -> None:
    Order.objects.filter(pk=order_id).update(status=f"cancelled: {reason}"[:16])


def book_parcel(order_id: int, parcel: int) -> dict:
    """Book the carrier for one parcel; booking the same parcel twice returns the booking."""
    from .models import ParcelShipment

    order = Order.objects.get(pk=order_id)
    shipment, _ = ParcelShipment.objects.get_or_create(
        order=order, parcel=parcel, defaults={"tracking_number": f"TRK-{order.number}-{parcel}"}
    )
    return {"parcel": parcel, "tracking_number": shipment.tracking_number}


def mark_shipped(order_id: int) -> None:
    Order.objects.filter(pk=order_id).update(status="shipped")


def notify_customer(order_id: int, outcome_id: int, text: str) -> None:
    """Send the customer one notice per workflow outcome (idempotent on ``outcome_id``)."""
    from .models import CustomerNotice

    CustomerNotice.objects.get_or_create(
        outcome_id=outcome_id, defaults={"order_id": order_id, "text": text[:200]}
    )


def count_orders_by_status() -> dict:
    """The nightly report's figures: how many orders are in each status."""
    from django.db.models import Count

    rows = Order.objects.values("status").annotate(count=Count("id")).order_by("status")
    return {row["status"]: row["count"] for row in rows}


def export_customer_orders(email: str) -> dict:
    """Pretend to send one customer's orders to the accounting system (a slow partner)."""
    numbers = list(Order.objects.filter(customer_email=email).values_list("number", flat=True))
    return {"customer": email, "orders": numbers}
