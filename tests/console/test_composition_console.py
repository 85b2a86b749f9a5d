"""The admin and the show command: parent and children with badges, the top-level filter,
the on_finish delivery and its "deliver now" button."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

import django_workerflow as workerflow
from django_workerflow.models import FinishDelivery, WorkflowInstance
from tests.support.admin import change_url, changelist_url

pytestmark = pytest.mark.django_db


@pytest.fixture
def order_family(define, workerflow_harness):
    """An order with two parcels' shipments (one waiting, one detached) and a failing hook."""

    def shipment(self):
        return self.wait("shipped", "shipped")

    shipment_definition = define(shipment, name="test-console-shipment")

    def order(self):
        self.start_child("parcel-2", shipment_definition, detached=True)
        return self.child("parcel-1", shipment_definition)

    def hook(self, outcome):
        raise ConnectionError("webhook down")

    order_definition = define(order, name="test-console-order")
    order_definition.on_finish = hook
    parent = workerflow.start(order_definition, key="order-1")
    workerflow_harness.drain()
    return parent


def test_change_page__links_the_children_with_their_status_badges(admin_client, order_family):
    body = admin_client.get(change_url(order_family)).content.decode()
    child = WorkflowInstance.objects.get(key="order-1/parcel-1")
    assert f'href="{change_url(child)}">order-1/parcel-1</a>' in body
    assert '<span class="wf-badge wf-status-running">Running</span>' in body
    assert "detached" in body
    assert "Child (2)" in body


def test_change_page__links_a_child_to_its_parent(admin_client, order_family):
    child = WorkflowInstance.objects.get(key="order-1/parcel-1")
    body = admin_client.get(change_url(child)).content.decode()
    assert f'href="{change_url(order_family)}">order-1</a>' in body


def test_changelist__filters_top_level_instances(admin_client, order_family):
    top = admin_client.get(changelist_url(level="top")).content.decode()
    children = admin_client.get(changelist_url(level="child")).content.decode()
    assert ">order-1<" in top
    assert "order-1/parcel-1" not in top
    assert "order-1/parcel-1" in children


def test_change_page__shows_the_delivery_and_deliver_now_makes_it_due(
    admin_client, order_family, workerflow_harness
):
    workerflow.send_event("order-1/parcel-1", "shipped", "T")
    workerflow_harness.drain()
    delivery = FinishDelivery.objects.get(instance=order_family)
    assert delivery.attempt_count == 1
    body = admin_client.get(change_url(order_family)).content.decode()
    assert "pending, 1 attempt(s)" in body
    assert "ConnectionError: webhook down" in body
    assert 'value="deliver-now"' in body

    response = admin_client.post(change_url(order_family, "deliver-now"))
    assert response.status_code == 302
    workerflow_harness.drain()
    delivery.refresh_from_db()
    assert delivery.attempt_count == 2


def test_deliver_now__needs_the_resume_permission(client, order_family, django_user_model):
    user = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    client.force_login(user)
    assert client.post(change_url(order_family, "deliver-now")).status_code == 403


def test_show__prints_parent_children_and_delivery(order_family):
    out = StringIO()
    call_command("workerflow", "show", "order-1", stdout=out)
    text = out.getvalue()
    assert "Parent: none" in text
    assert "Children (2):" in text
    assert "  order-1/parcel-1  running" in text
    assert "  order-1/parcel-2  running, detached" in text
    assert "on_finish delivery: none yet (created when the instance finishes)" in text

    child = StringIO()
    call_command("workerflow", "show", "order-1/parcel-1", stdout=child)
    assert "Parent: order-1 (running)" in child.getvalue()
    assert "on_finish delivery: none (the definition has no on_finish)" in child.getvalue()


def test_show__prints_a_finished_child_steps_result_as_the_admin_does(
    admin_client, order_family, workerflow_harness
):
    workerflow.send_event("order-1/parcel-1", "shipped", {"tracking": "T-1"})
    workerflow_harness.drain()
    out = StringIO()
    call_command("workerflow", "show", "order-1", stdout=out)
    [line] = [line for line in out.getvalue().splitlines() if line.lstrip().startswith("parcel-1")]
    assert line.endswith('-> {"tracking":"T-1"}')
    body = admin_client.get(change_url(order_family)).content.decode()
    assert "&quot;tracking&quot;: &quot;T-1&quot;" in body
