"""What commits with an instance's finish (django_workerflow/runtime/finishing.py), called
directly on rows: the look around (children, waiters), the cancel that cascades to the
attached children only, with the reason that says why, and the waiter woken."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_workerflow.models import WorkflowEvent, WorkflowInstance
from django_workerflow.runtime import finishing
from django_workerflow.values.clock import now
from django_workerflow.values.states import (
    StepState,
    StepType,
    WorkflowEventType,
    WorkflowStatus,
)
from tests.support.factories import StepFactory, WorkflowInstanceFactory

pytestmark = pytest.mark.django_db


def running(**fields) -> WorkflowInstance:
    return WorkflowInstanceFactory(status=WorkflowStatus.RUNNING, **fields)


def cancel(instance: WorkflowInstance, reason: str | None) -> None:
    """Cancel ``instance`` as the runtime does: look around, lock, move, follow up."""
    at = now()
    with transaction.atomic():
        followups = finishing.lock_waiters(instance.pk)
        locked = WorkflowInstance.objects.select_for_update().get(pk=instance.pk)
        locked.set_cancelled(at, reason)
        finishing.instance_finished(locked, at, reason, followups)


def cancel_reason(instance: WorkflowInstance) -> str | None:
    event = WorkflowEvent.objects.get(instance=instance, type=WorkflowEventType.CANCELLED)
    return event.reason


def test_look_around__of_an_instance_alone_has_nothing_to_follow_up():
    instance = running()

    assert finishing.look_around(instance.pk) == finishing.Followups(
        has_children=False, has_waiting=False
    )


def test_look_around__sees_an_unfinished_child_and_not_a_finished_one():
    parent = running()
    running(parent=parent)
    finished = running()
    WorkflowInstanceFactory(parent=finished, status=WorkflowStatus.COMPLETED)

    assert finishing.look_around(parent.pk).has_children
    assert not finishing.look_around(finished.pk).has_children


def test_look_around__sees_an_instance_whose_child_step_waits_for_it():
    child = running()
    StepFactory(
        instance=running(), type=StepType.CHILD, state=StepState.WAITING, child_instance=child
    )

    assert finishing.look_around(child.pk).has_waiting


def test_instance_finished__a_cancel_cascades_to_the_attached_children_only():
    parent = running()
    attached = running(parent=parent)
    detached = running(parent=parent, detached=True)
    done = WorkflowInstanceFactory(parent=parent, status=WorkflowStatus.COMPLETED)

    cancel(parent, "customer asked")

    statuses = dict(WorkflowInstance.objects.values_list("pk", "status"))
    assert statuses[attached.pk] == WorkflowStatus.CANCELLED
    assert statuses[detached.pk] == WorkflowStatus.RUNNING
    assert statuses[done.pk] == WorkflowStatus.COMPLETED
    assert cancel_reason(attached) == f"{finishing.PARENT_CANCELLED}: customer asked"


def test_instance_finished__a_cascade_keeps_the_first_reason_down_the_family():
    parent = running()
    child = running(parent=parent)
    grandchild = running(parent=child)

    cancel(parent, None)

    assert cancel_reason(child) == finishing.PARENT_CANCELLED
    assert cancel_reason(grandchild) == finishing.PARENT_CANCELLED
    assert WorkflowInstance.objects.get(pk=grandchild.pk).status == WorkflowStatus.CANCELLED


def test_instance_finished__wakes_the_instance_whose_child_step_waits_for_it():
    waiter = running(alarm_at=None)
    child = running(parent=waiter)
    StepFactory(instance=waiter, type=StepType.CHILD, state=StepState.WAITING, child_instance=child)

    cancel(child, "not needed")

    assert WorkflowInstance.objects.get(pk=waiter.pk).alarm_at is not None
