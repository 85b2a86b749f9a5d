"""on_finish: a delivery row per finished instance, delivered at least once, with backoff."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition, WorkflowStateError
from django_workerflow.conf import settings
from django_workerflow.models import FinishDelivery
from django_workerflow.runtime.composition import deliveries
from django_workerflow.testing import WorkerDeath

pytestmark = pytest.mark.django_db


def _with_hook(define, execute, hook, name=None):
    definition = define(execute, name=name)
    definition.on_finish = hook
    return definition


def test_on_finish__definitions_without_it_create_no_delivery(define, workerflow_harness):
    workerflow.start(define(lambda self: 1))
    workerflow_harness.drain()
    assert FinishDelivery.objects.count() == 0


def test_on_finish__is_called_once_with_the_outcome(define, workerflow_harness):
    calls = []

    def hook(self, outcome):
        calls.append((self.key, self.input, outcome))

    definition = _with_hook(define, lambda self: {"total": self.input * 2}, hook)
    workerflow.start(definition, key="o1", input=21)
    workerflow_harness.drain()
    assert len(calls) == 1
    key, input, outcome = calls[0]
    delivery = FinishDelivery.objects.get(instance__key="o1")
    assert (key, input) == ("o1", 21)
    assert (outcome.id, outcome.key, outcome.status, outcome.result) == (
        delivery.pk,
        "o1",
        "completed",
        {"total": 42},
    )
    assert (outcome.error_name, outcome.error_message, outcome.reason) == ("", "", None)
    assert outcome.finished_at == workerflow_harness.now()
    assert (delivery.attempt_count, delivery.acknowledged_at) == (1, workerflow_harness.now())
    workerflow_harness.advance(timedelta(days=1))
    assert len(calls) == 1


def test_on_finish__hears_failures_and_cancellations(define, workerflow_harness):
    outcomes = []

    def hook(self, outcome):
        outcomes.append((outcome.key, outcome.status, outcome.error_name, outcome.reason))

    def failing(self):
        raise ValueError("bad")

    workerflow.start(_with_hook(define, failing, hook), key="f")
    waiting = workerflow.start(
        _with_hook(define, lambda self: self.wait("w", "never"), hook), key="c"
    )
    workerflow_harness.drain()
    workerflow.cancel(waiting, reason="operator")
    workerflow_harness.drain()
    assert outcomes == [("f", "failed", "ValueError", None), ("c", "cancelled", "", "operator")]


def test_on_finish__step_helpers_raise_workflow_state_error(define, workerflow_harness):
    seen = []

    def hook(self, outcome):
        try:
            self.run("nope", lambda: 1)
        except WorkflowStateError as exc:
            seen.append(exc)

    workerflow.start(_with_hook(define, lambda self: 1, hook))
    workerflow_harness.drain()
    assert len(seen) == 1


def test_on_finish__the_delivery_row_commits_with_the_finish(define, workerflow_harness):
    instance = workerflow.start(
        _with_hook(define, lambda self: self.wait("w", "x"), lambda self, o: None)
    )
    workerflow_harness.drain()
    inside = []

    def cancel_then_roll_back() -> None:
        with transaction.atomic():
            workerflow.cancel(instance)
            inside.append(FinishDelivery.objects.count())
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        cancel_then_roll_back()
    assert inside == [1]
    assert FinishDelivery.objects.count() == 0


def test_on_finish__a_failing_hook_backs_off_1_2_4_seconds_at_virtual_time(
    define, workerflow_harness
):
    calls = []

    def hook(self, outcome):
        calls.append((workerflow_harness.now(), outcome.id))
        if len(calls) < 5:
            raise ConnectionError("webhook down")

    workerflow.start(_with_hook(define, lambda self: 1, hook), key="b")
    start = workerflow_harness.now()
    workerflow_harness.drain()
    workerflow_harness.advance(20)  # the walk stops at each retry's due time
    offsets = [(when - start).total_seconds() for when, _ in calls]
    assert offsets == [0, 1, 3, 7, 15]  # waits of 1, 2, 4 and 8 seconds
    assert len({id for _, id in calls}) == 1
    delivery = FinishDelivery.objects.get()
    assert delivery.attempt_count == 5
    assert delivery.acknowledged_at == start + timedelta(seconds=15)
    assert delivery.last_error_name == "ConnectionError"
    assert [attempt["error"] for attempt in delivery.attempts] == [
        "ConnectionError: webhook down"
    ] * 4 + [None]


def test_on_finish__the_backoff_is_capped_at_one_hour_without_limit():
    assert [deliveries.redelivery_delay(n).total_seconds() for n in (1, 2, 3, 12, 13, 100)] == [
        1,
        2,
        4,
        2048,
        3600,
        3600,
    ]


def test_on_finish__a_worker_that_died_mid_hook_is_redelivered_after_the_lease(
    define, workerflow_harness
):
    calls = []

    class WorkerDied(WorkerDeath):
        pass

    def hook(self, outcome):
        calls.append(outcome.id)
        if len(calls) == 1:
            raise WorkerDied()

    workerflow.start(_with_hook(define, lambda self: 1, hook))
    with pytest.raises(WorkerDied):
        workerflow_harness.drain()
    workerflow_harness.advance(settings.LEASE_SECONDS - 1)
    assert len(calls) == 1
    workerflow_harness.advance(2)
    assert len(calls) == 2
    assert calls[0] == calls[1]
    assert FinishDelivery.objects.get().acknowledged_at is not None


def test_on_finish__deliver_now_makes_a_waiting_retry_due(define, workerflow_harness):
    calls = []

    def hook(self, outcome):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("down")

    workerflow.start(_with_hook(define, lambda self: 1, hook))
    workerflow_harness.drain()
    delivery = FinishDelivery.objects.get()
    assert deliveries.deliver_now(delivery) is True
    workerflow_harness.drain()
    assert len(calls) == 2
    assert deliveries.deliver_now(delivery) is False


def test_on_finish__is_declared_on_the_base_class_and_a_definition_that_keeps_it_is_not_delivered(
    define, workerflow_harness
):
    assert WorkflowDefinition.on_finish.__doc__
    assert not WorkflowDefinition.hears_finish()
    plain = define(lambda self: "done")
    assert not plain.hears_finish()

    instance = workerflow.start(plain, key="plain")
    workerflow_harness.drain()

    instance.refresh_from_db()
    assert instance.status == "completed"
    assert not FinishDelivery.objects.filter(instance=instance).exists()


def test_on_finish__a_retried_instance_that_finishes_again_is_delivered_again(
    define, workerflow_harness
):
    outcomes = []
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first time")
        return "second time"

    def execute(self):
        return self.run("flaky", flaky, max_attempts=1)

    instance = workerflow.start(
        _with_hook(define, execute, lambda self, o: outcomes.append((o.id, o.status)))
    )
    workerflow_harness.drain()
    workerflow.retry(instance)
    workerflow_harness.drain()
    first, second = FinishDelivery.objects.order_by("id")
    assert outcomes == [(first.pk, "failed"), (second.pk, "completed")]


def test_on_finish__a_redelivery_after_a_retry_reports_the_finish_it_was_created_for(
    define, workerflow_harness
):
    """The delivery of a failure, redelivered after the instance was retried (it is running
    now) and again after it completed, still reports that failure (issue 20, item 13)."""
    outcomes = []
    broken = {"hook": True, "step": True}

    def hook(self, outcome):
        outcomes.append(
            (outcome.id, outcome.status, outcome.result, outcome.error_name, outcome.finished_at)
        )
        if broken["hook"]:
            raise RuntimeError("webhook down")

    def flaky():
        if broken["step"]:
            raise RuntimeError("first time")
        return "second time"

    def execute(self):
        self.run("flaky", flaky, max_attempts=1)
        self.sleep("nap", 60)
        return "done"

    instance = workerflow.start(_with_hook(define, execute, hook), key="redelivered")
    workerflow_harness.drain()
    failed_at = workerflow_harness.now()
    failure = FinishDelivery.objects.get()
    assert outcomes == [(failure.pk, "failed", None, "MaxAttemptsExceededError", failed_at)]

    broken["step"] = False
    workerflow.retry(instance)
    workerflow_harness.advance(1)  # the hook's retry: the instance sleeps in 'nap'
    assert instance.steps.get(step_id="nap").state == "waiting"
    broken["hook"] = False
    workerflow_harness.advance(120)  # the next redelivery, then the completion's delivery

    completion = FinishDelivery.objects.exclude(pk=failure.pk).get()
    expected_failure = (failure.pk, "failed", None, "MaxAttemptsExceededError", failed_at)
    assert outcomes[:3] == [expected_failure] * 3
    assert outcomes[3:] == [
        (completion.pk, "completed", "done", "", completion.created_at),
    ]
