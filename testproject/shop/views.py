"""Checkout: create an order and start its workflow in the same transaction."""

from __future__ import annotations

import secrets

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance

from .models import Order, Payment
from .workflows import OrderFulfillment


@require_http_methods(["GET", "POST"])
def orders(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        with transaction.atomic():
            order = Order.objects.create(
                number=secrets.token_hex(4).upper(),
                customer_email=request.POST.get("email") or "customer@example.com",
                amount_cents=int(request.POST.get("amount_cents") or 4200),
            )
            # Started inside the transaction: if the order rolls back, no workflow runs.
            workerflow.start(
                OrderFulfillment,
                key=order.workflow_key,
                input={"order_id": order.pk},
                # An attribute holds at most 200 characters; an email field, 254.
                attributes={"customer": order.customer_email[:200]},
            )
        return redirect("shop:orders")
    recent = list(Order.objects.prefetch_related("payments")[:20])
    instances = WorkflowInstance.objects.in_bulk(
        [order.workflow_key for order in recent], field_name="key"
    )
    rows = [
        (order, instance, payable(order, instance))
        for order, instance in ((order, instances.get(order.workflow_key)) for order in recent)
    ]
    return render(request, "shop/orders.html", {"rows": rows})


def payable(order: Order, instance: WorkflowInstance | None) -> bool:
    """Whether the order still waits for its payment: unpaid, and its workflow not finished
    (a shipped or cancelled order takes no payment)."""
    return (
        instance is not None
        and not instance.is_terminal
        and not order.payments.all()
        and order.status in ("new", "reserved")
    )


@require_http_methods(["POST"])
def pay(request: HttpRequest, number: str) -> HttpResponse:
    order = Order.objects.get(number=number)
    instance = WorkflowInstance.objects.filter(key=order.workflow_key).first()
    if not payable(order, instance):
        return redirect("shop:orders")  # paid, shipped or cancelled meanwhile: nothing to pay
    # The post_save handler in signals.py sends the workflow its payment event.
    Payment.objects.create(
        order=order, amount_cents=order.amount_cents, reference=f"PAY-{secrets.token_hex(3)}"
    )
    return redirect("shop:orders")
