"""The claim and the completed settle as one statement each (PostgreSQL), and the paths
they fall back to: every case ends as the statements they fold would end it."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db.models.signals import pre_save
from django.utils import timezone

import django_workerflow as workerflow
from django_workerflow.models import Step, WorkflowEvent, WorkflowInstance
from django_workerflow.runtime import tick as tick_module
from django_workerflow.runtime.tick import tick
from django_workerflow.values.states import TickEnding

pytestmark = pytest.mark.django_db(transaction=True)


def _steps(instance: WorkflowInstance) -> list[tuple[str, str]]:
    return list(Step.objects.filter(instance=instance).values_list("step_id", "state"))


def _events(instance: WorkflowInstance) -> list[str]:
    rows = WorkflowEvent.objects.filter(instance=instance).order_by("id")
    return list(rows.values_list("type", flat=True))


def test_folded_tick__one_step_completes(define):
    instance = workerflow.start(define(lambda self: self.run("a", lambda: 1)))

    assert tick(instance.pk).outcome == TickEnding.COMPLETED

    instance.refresh_from_db()
    assert (instance.status, instance.result, instance.lease_token) == ("completed", 1, None)
    assert _steps(instance) == [("a", "succeeded")]
    assert _events(instance) == ["created", "started", "completed"]


def test_folded_settle__lease_lost_during_the_pass__stops_and_keeps_the_success(define):
    holder: dict[str, int] = {}

    def steal() -> int:
        WorkflowInstance.objects.filter(pk=holder["pk"]).update(lease_token="another")
        return 1

    instance = workerflow.start(define(lambda self: self.run("a", steal)))
    holder["pk"] = instance.pk

    assert tick(instance.pk).outcome == TickEnding.STOPPED

    instance.refresh_from_db()
    assert (instance.status, instance.lease_token) == ("running", "another")
    assert _steps(instance) == [("a", "succeeded")]  # fenced by the step row, not the lease
    assert "completed" not in _events(instance)


@pytest.mark.parametrize("verb", ["cancel", "pause"])
def test_folded_settle__cancel_or_pause_during_the_pass__leaves_the_operators_state(define, verb):
    holder: dict[str, WorkflowInstance] = {}

    def interrupt() -> int:
        getattr(WorkflowInstance.objects.get(pk=holder["i"].pk), verb)()
        return 1

    instance = workerflow.start(define(lambda self: self.run("a", interrupt)))
    holder["i"] = instance

    assert tick(instance.pk).outcome == TickEnding.STOPPED

    instance.refresh_from_db()
    assert instance.status == ("cancelled" if verb == "cancel" else "paused")
    assert instance.lease_token is None
    assert _steps(instance) == [("a", "succeeded")]
    assert "completed" not in _events(instance)


def test_folded_tick__a_pre_save_receiver__still_hears_every_write(define):
    heard: list[str] = []

    def receiver(sender, instance, **_):
        heard.append(instance.status)

    pre_save.connect(receiver, sender=WorkflowInstance)
    try:
        instance = workerflow.start(define(lambda self: self.run("a", lambda: 1)))
        assert tick(instance.pk).outcome == TickEnding.COMPLETED
    finally:
        pre_save.disconnect(receiver, sender=WorkflowInstance)

    assert "running" in heard
    assert heard[-1] == "completed"
    instance.refresh_from_db()
    assert instance.status == "completed"
    assert _events(instance) == ["created", "started", "completed"]


def test_folded_settle__an_atomic_step__its_effect_once(define):
    def effect() -> int:
        WorkflowEvent.objects.create(
            instance_id=holder["pk"], type="debounced", reason="x", recorded_at=timezone.now()
        )
        return 1

    holder: dict[str, int] = {}
    instance = workerflow.start(define(lambda self: self.run("a", effect, atomic=True)))
    holder["pk"] = instance.pk

    assert tick(instance.pk).outcome == TickEnding.COMPLETED

    instance.refresh_from_db()
    assert instance.status == "completed"
    assert _steps(instance) == [("a", "succeeded")]
    assert _events(instance).count("debounced") == 1


def test_folded_claim__refused_after_the_statement__is_rolled_back(define):
    instance = workerflow.start(define(lambda self: self.run("a", lambda: 1)))

    with mock.patch.object(tick_module.registry, "lookup", return_value=None):
        report = tick(instance.pk)

    assert report.outcome == TickEnding.UNREGISTERED
    instance.refresh_from_db()
    assert instance.status == "pending"
    assert instance.lease_token is None
    assert instance.alarm_cause == "unregistered"
    assert _events(instance) == ["created"]
    assert _steps(instance) == []
    # And the next tick with the definition here claims and completes it.
    WorkflowInstance.objects.filter(pk=instance.pk).update(alarm_at=instance.created_at)
    assert tick(instance.pk).outcome == TickEnding.COMPLETED
