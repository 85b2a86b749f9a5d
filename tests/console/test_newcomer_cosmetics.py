"""A newcomer's small surprises, gone: the CLI's help names every subcommand, the schedule
list does not offer "to change" on read-only rows, the demo logs its intentional failure in
one line, and the shop offers "Pay" only on an order that still awaits its payment."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import load_command_class
from django.urls import reverse

import django_workerflow as workerflow
from django_workerflow.testing import Harness
from testproject.demoapp.logs import OneLineExceptions
from testproject.shop.models import Order, Payment
from testproject.shop.workflows import OrderFulfillment

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


def test_workerflow_help__names_every_subcommand():
    command = load_command_class("django_workerflow", "workerflow")
    listed = command.create_parser("manage.py", "workerflow").format_help()
    subcommands = set(re.findall(r"^    ([a-z-]+)\b", listed, re.MULTILINE))

    named = set(re.findall(r"[a-z-]+", command.help.split(":", 1)[1]))

    assert "metrics" in subcommands
    assert subcommands - named == set()


def test_schedule_list__says_view_not_change(admin_client, define_with):
    define_with(lambda self: None, name="nightly", schedule="0 3 * * *")
    with Harness(start=T0, schedules=["nightly"]):
        page = admin_client.get(reverse("admin:workerflow_workflowschedule_changelist"))

    html = page.content.decode()
    assert "Select workflow schedule to view" in html
    assert "to change" not in html


def test_demo_logs__an_exception_in_one_line():
    formatter = OneLineExceptions("%(levelname)s %(message)s")
    try:
        raise RuntimeError("invoicing partner unavailable\nfor ORD-1")
    except RuntimeError as error:
        record = logging.LogRecord("x", logging.INFO, __file__, 1, "failed key=%s", ("k",), None)
        record.exc_info = (type(error), error, error.__traceback__)

    line = formatter.format(record)

    assert line == (
        "INFO failed key=k (RuntimeError: invoicing partner unavailable for ORD-1; "
        "the traceback is on the instance's page)"
    )


def test_shop__offers_pay_only_on_orders_awaiting_payment(client):
    with Harness(start=T0) as harness:
        orders = {}
        for label in ("unpaid", "paid", "cancelled"):
            order = Order.objects.create(
                number=label.upper(), customer_email="c@example.com", amount_cents=100
            )
            workerflow.start(OrderFulfillment, key=order.workflow_key, input={"order_id": order.pk})
            orders[label] = order
        harness.drain()
        Payment.objects.create(order=orders["paid"], amount_cents=100, reference="P")
        workerflow.cancel(orders["cancelled"].workflow_key, reason="test")
        harness.drain()
        harness.advance(timedelta(seconds=1))

        page = client.get(reverse("shop:orders")).content.decode()
        refused = client.post(reverse("shop:pay", args=["CANCELLED"]))

    for label, offered in (("UNPAID", True), ("PAID", False), ("CANCELLED", False)):
        form = f'action="{reverse("shop:pay", args=[label])}"'
        assert (form in page) is offered, label
    assert refused.status_code == 302
    assert not Payment.objects.filter(order=orders["cancelled"]).exists()
