"""The docs' worked example: the shop's order starts a shipment workflow per parcel."""

from __future__ import annotations

import pytest

import django_workerflow as workerflow
from django_workerflow.models import FinishDelivery, WorkflowInstance
from testproject.shop.models import CustomerNotice, Order, ParcelShipment
from testproject.shop.workflows import MultiParcelOrder

pytestmark = pytest.mark.django_db


def test_shop__an_order_ships_one_child_workflow_per_parcel(workerflow_harness):
    order = Order.objects.create(number="M-1", customer_email="m@example.com", amount_cents=900)
    instance = workerflow.start(
        MultiParcelOrder, key=order.workflow_key, input={"order_id": order.pk, "parcels": 3}
    )
    workerflow_harness.drain()
    children = WorkflowInstance.objects.filter(parent=instance)
    assert sorted(children.values_list("key", flat=True)) == [
        "order-M-1/ship-parcel-1",
        "order-M-1/ship-parcel-2",
        "order-M-1/ship-parcel-3",
    ]
    with pytest.raises(TimeoutError):
        instance.wait_result()  # the parcels wait for their pick-up

    workerflow_harness.advance(5)
    assert instance.wait_result() == {
        "parcels": [{"parcel": n, "tracking_number": f"TRK-M-1-{n}"} for n in (1, 2, 3)]
    }
    assert ParcelShipment.objects.filter(order=order).count() == 3
    assert Order.objects.get(pk=order.pk).status == "shipped"
    notice = CustomerNotice.objects.get()
    assert notice.text == "Order order-M-1: completed, 3 parcels on their way"
    assert notice.outcome_id == FinishDelivery.objects.get(instance=instance).pk


def test_demo__places_an_order_whose_workflow_has_children(workerflow_harness):
    from testproject import demo

    number = demo.place_multi_parcel_order()
    workerflow_harness.drain()
    parent = WorkflowInstance.objects.get(key=f"order-{number}")
    assert parent.children.count() == 3
