"""``models.instance.WorkflowInstance``'s transitions: fields, one save, one event, and
nothing else. What follows a finish (children, waiting parents, the delivery, admission) is
the runtime's ``finishing.instance_finished``, called by name where an instance finishes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition
from django_workerflow.models import WorkflowEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.testing import Harness
from django_workerflow.values.clock import now

pytestmark = pytest.mark.django_db


def _parent_waiting_for_a_child(
    define: Callable[..., type[WorkflowDefinition]], harness: Harness, key: str
) -> tuple[WorkflowInstance, WorkflowInstance]:
    def child(self: Any) -> Any:
        return self.wait("shipped", "shipped")

    child_definition = define(child)

    def parent(self: Any) -> Any:
        return self.child("ship", child_definition)

    instance = workerflow.start(define(parent), key=key)
    harness.drain()
    return (
        WorkflowInstance.objects.get(pk=instance.pk),
        WorkflowInstance.objects.get(key=f"{key}/ship"),
    )


@pytest.mark.parametrize(
    "finish",
    [
        pytest.param(lambda i: i.set_cancelled(now(), "by hand"), id="set_cancelled"),
        pytest.param(lambda i: i.set_completed("done", now()), id="set_completed"),
    ],
)
def test_transition__a_finishing_transition_leaves_the_children_as_they_are(
    define: Callable[..., type[WorkflowDefinition]],
    workerflow_harness: Harness,
    finish: Callable[[WorkflowInstance], None],
) -> None:
    parent, child = _parent_waiting_for_a_child(define, workerflow_harness, "order-1")
    assert (parent.status, child.status) == (WorkflowStatus.RUNNING, WorkflowStatus.RUNNING)

    with transaction.atomic():
        finish(parent)

    parent.refresh_from_db()
    child.refresh_from_db()
    assert parent.status in (WorkflowStatus.CANCELLED, WorkflowStatus.COMPLETED)
    assert child.status == WorkflowStatus.RUNNING
    assert not WorkflowEvent.objects.filter(instance=child, type="cancelled").exists()


def test_transition__only_the_runtime_s_cancel_cascades(
    define: Callable[..., type[WorkflowDefinition]], workerflow_harness: Harness
) -> None:
    parent, child = _parent_waiting_for_a_child(define, workerflow_harness, "order-2")

    assert workerflow.cancel(parent, reason="customer asked")

    child.refresh_from_db()
    assert child.status == WorkflowStatus.CANCELLED
