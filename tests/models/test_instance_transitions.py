"""Every status change of ``WorkflowInstance`` moves through the state machine
(``values/transitions.py``): each transition from each status either moves as the table
allows, announcing the row's own previous status, or raises ``InstanceTransitionError``
naming the instance and both statuses, and writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.db.models.signals import post_save

from django_workerflow.exceptions import InstanceTransitionError, WorkflowStateError
from django_workerflow.models import WorkflowEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.values import transitions
from django_workerflow.values.clock import now
from tests.conftest import StatusRecorder  # the status_changes fixture's recorder
from tests.support.factories import WorkflowInstanceFactory

pytestmark = pytest.mark.django_db

Transition = Callable[[WorkflowInstance], None]

#: Each transition that changes the status, and the status it moves to.
TRANSITIONS: dict[str, tuple[Transition, WorkflowStatus]] = {
    "start_running": (
        lambda i: i.start_running("token", now() + timedelta(seconds=12), now()),
        WorkflowStatus.RUNNING,
    ),
    "set_paused": (lambda i: i.set_paused(now()), WorkflowStatus.PAUSED),
    "set_resumed": (lambda i: i.set_resumed(now()), WorkflowStatus.RUNNING),
    "set_cancelled": (lambda i: i.set_cancelled(now(), "by hand"), WorkflowStatus.CANCELLED),
    "set_completed": (lambda i: i.set_completed({"ok": 1}, now()), WorkflowStatus.COMPLETED),
    "set_failed": (lambda i: i.set_failed("E", "E: boom", now()), WorkflowStatus.FAILED),
    "set_retried": (lambda i: i.set_retried(now(), None), WorkflowStatus.RUNNING),
    **{
        f"set_revived_{status}": (
            lambda i, status=status: i.set_revived(status, now(), "taken back"),
            status,
        )
        for status in (WorkflowStatus.PENDING, WorkflowStatus.RUNNING, WorkflowStatus.PAUSED)
    },
}

CASES = [
    pytest.param(name, source, id=f"{name}-from-{source}")
    for name in TRANSITIONS
    for source in WorkflowStatus
]


def _events(instance: WorkflowInstance) -> list[str]:
    return list(WorkflowEvent.objects.filter(instance=instance).values_list("type", flat=True))


@pytest.mark.parametrize(("name", "source"), CASES)
def test_transition__moves_only_as_the_table_allows(
    name: str,
    source: WorkflowStatus,
    status_changes: StatusRecorder,
    django_capture_on_commit_callbacks: Any,
) -> None:
    move, target = TRANSITIONS[name]
    instance: WorkflowInstance = WorkflowInstanceFactory(
        key=f"order-{name}-{source}", status=source
    )

    with django_capture_on_commit_callbacks(execute=True):
        if source in transitions.SOURCES[target]:
            with transaction.atomic():
                move(instance)
        else:
            with pytest.raises(InstanceTransitionError) as refused, transaction.atomic():
                move(instance)

    stored = WorkflowInstance.objects.get(pk=instance.pk)
    if source in transitions.SOURCES[target]:
        assert (instance.status, stored.status) == (target, target)
        assert len(_events(instance)) == 1
        assert status_changes.changes == [(instance.key, target, source)]
    else:
        message = str(refused.value)
        assert f"Instance '{instance.key}'" in message
        assert f"from status '{source}' to '{target}'" in message
        assert isinstance(refused.value, WorkflowStateError)
        assert (instance.status, stored.status) == (source, source)
        assert _events(instance) == []
        assert status_changes.changes == []


def test_transition__a_move_on_a_stale_object_writes_nothing(
    status_changes: StatusRecorder, django_capture_on_commit_callbacks: Any
) -> None:
    """An object read running, whose row a pause changed since: completing it would
    overwrite the pause and announce 'running' as the previous status."""
    instance: WorkflowInstance = WorkflowInstanceFactory(
        key="order-stale", status=WorkflowStatus.RUNNING, alarm_cause="sleep"
    )
    WorkflowInstance.objects.get(pk=instance.pk).set_paused(now())

    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(InstanceTransitionError) as refused,
        transaction.atomic(),
    ):
        instance.set_completed({"ok": 1}, now())

    assert str(refused.value).startswith(
        "Instance 'order-stale' cannot move from status 'running' to 'completed': its row "
        "has status 'paused', changed since it was read."
    )
    assert WorkflowInstance.objects.get(pk=instance.pk).status == WorkflowStatus.PAUSED
    assert instance.status == WorkflowStatus.RUNNING  # the object is left as it was read
    assert (instance.result, instance.alarm_cause) == (None, "sleep")
    assert _events(instance) == ["paused"]
    assert status_changes.changes == []


def test_transition__a_move_through_the_orm_checks_the_row_too(
    django_capture_on_commit_callbacks: Any,
) -> None:
    """With a post_save receiver connected the row is saved by the ORM (so it fires), and
    the stale row is refused all the same."""
    saved: list[int] = []

    def receiver(sender: Any, instance: WorkflowInstance, **kwargs: Any) -> None:
        saved.append(instance.pk)

    instance: WorkflowInstance = WorkflowInstanceFactory(
        key="order-orm", status=WorkflowStatus.RUNNING
    )
    WorkflowInstance.objects.get(pk=instance.pk).set_paused(now())
    post_save.connect(receiver, sender=WorkflowInstance)
    try:
        with pytest.raises(InstanceTransitionError), transaction.atomic():
            instance.set_failed("E", "E: boom", now())
        fresh = WorkflowInstance.objects.get(pk=instance.pk)
        fresh.set_resumed(now())
    finally:
        post_save.disconnect(receiver, sender=WorkflowInstance)

    assert saved == [instance.pk]  # the resume, through the ORM
    assert WorkflowInstance.objects.get(pk=instance.pk).status == WorkflowStatus.RUNNING
