"""Retrying a failed instance: what reopens, what never runs again, and what is refused."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest

import django_workerflow as workerflow
from django_workerflow import WorkflowInputError, WorkflowStateError
from django_workerflow.models import WorkflowEvent, step_events_of
from tests.support.instances import refreshed, step, workflow_event_types

pytestmark = pytest.mark.django_db


def _attempts(instance, step_id):
    return [
        event.attempt_number
        for event in step_events_of(instance)
        if event.step.step_id == step_id and event.type == "attempt_started"
    ]


def test_retry__reruns_the_failed_step_with_a_fresh_budget_and_continued_attempt_numbers(
    workerflow_harness, define
):
    calls = {"before": 0, "flaky": 0, "after": 0}
    broken = {"on": True}

    def flaky():
        calls["flaky"] += 1
        if broken["on"]:
            raise TypeError("list indices must be integers")
        return "ok"

    def execute(self):
        self.run("before", lambda: calls.__setitem__("before", calls["before"] + 1))
        value = self.run("flaky", flaky, max_attempts=3, backoff=lambda attempt: 0)
        self.run("after", lambda: calls.__setitem__("after", calls["after"] + 1))
        return value

    instance = workerflow.start(define(execute), key="order-1")
    workerflow_harness.drain()
    assert refreshed(instance).status == "failed"
    assert calls == {"before": 1, "flaky": 3, "after": 0}

    broken["on"] = False
    workerflow.retry("order-1", reason="fixed the index")
    assert refreshed(instance).status == "running"
    workerflow_harness.drain()

    instance = refreshed(instance)
    assert instance.status == "completed"
    assert instance.result == "ok"
    assert calls == {"before": 1, "flaky": 4, "after": 1}
    assert _attempts(instance, "flaky") == [1, 2, 3, 4]
    assert step(instance, "flaky").max_attempts == 6
    assert instance.error_name == ""
    assert instance.error_traceback == ""


def test_retry__gives_a_run_step_that_fails_again_its_max_attempts_more(workerflow_harness, define):
    calls = []

    def always():
        calls.append(1)
        raise RuntimeError("still broken")

    def execute(self):
        self.run("flaky", always, max_attempts=3, backoff=lambda attempt: 0)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    instance.retry()
    workerflow_harness.drain()

    instance = refreshed(instance)
    assert instance.status == "failed"
    assert len(calls) == 6
    assert _attempts(instance, "flaky") == [1, 2, 3, 4, 5, 6]
    assert instance.error_name == "MaxAttemptsExceededError"
    assert instance.error_step_id == "flaky"


def test_retry__records_a_retried_event_with_the_reason_and_rings_a_bell(
    workerflow_harness, define
):
    def execute(self):
        self.run("boom", lambda: 1 / 0, max_attempts=1)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    from django_workerflow.workers import bells

    rung = []
    original = bells.arm
    bells.arm = lambda pk, when: rung.append((pk, when)) or original(pk, when)
    try:
        workerflow.retry(instance, reason="deployed the fix")
    finally:
        bells.arm = original

    instance = refreshed(instance)
    assert rung == [(instance.pk, workerflow_harness.now())]
    assert instance.alarm_at == workerflow_harness.now()
    assert instance.finished_at is None
    event = WorkflowEvent.objects.filter(instance=instance).last()
    assert (event.type, event.reason) == ("retried", "deployed the fix")
    assert workflow_event_types(instance)[-2:] == ["failed", "retried"]


def test_retry__reopens_the_ancestors_that_failed_because_of_a_nested_step(
    workerflow_harness, define
):
    calls = {"outer": 0, "inner": 0, "sibling": 0}
    broken = {"on": True}

    def inner():
        calls["inner"] += 1
        if broken["on"]:
            raise KeyError("sku")
        return 2

    def execute(self):
        def outer():
            calls["outer"] += 1
            self.run("sibling", lambda: calls.__setitem__("sibling", calls["sibling"] + 1))
            return self.run("inner", inner, max_attempts=2, backoff=lambda attempt: 0)

        return self.run("outer", outer, max_attempts=2, backoff=lambda attempt: 0)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    instance = refreshed(instance)
    assert instance.status == "failed"
    assert instance.error_step_id == "outer"
    # The outer callback runs again on the pass after the inner step's backoff.
    assert calls == {"outer": 2, "inner": 2, "sibling": 1}

    broken["on"] = False
    instance.retry()
    workerflow_harness.drain()

    instance = refreshed(instance)
    assert instance.status == "completed"
    assert instance.result == 2
    assert calls == {"outer": 3, "inner": 3, "sibling": 1}
    assert _attempts(instance, "outer") == [1, 2]
    assert _attempts(instance, "inner") == [1, 2, 3]


def test_retry__makes_a_timed_out_wait_wait_again_for_as_long_as_it_first_did(
    workerflow_harness, define
):
    def execute(self):
        return self.wait("approval", "approved", timeout=timedelta(hours=2))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    workerflow_harness.advance(timedelta(hours=3))
    assert refreshed(instance).status == "failed"
    assert refreshed(instance).error_name == "WaitStepTimedOutError"

    workerflow_harness.advance(timedelta(hours=1))
    retried_at = workerflow_harness.now()
    workerflow.retry(instance)
    workerflow_harness.drain()

    instance = refreshed(instance)
    assert instance.status == "running"
    wait = step(instance, "approval")
    assert wait.state == "waiting"
    assert wait.timeout_at == retried_at + timedelta(hours=2)
    assert instance.alarm_at == retried_at + timedelta(hours=2)

    workerflow.send_event(instance, "approved", {"by": "ops"})
    workerflow_harness.drain()
    assert refreshed(instance).status == "completed"
    assert refreshed(instance).result == {"by": "ops"}


def test_retry__replays_a_failure_raised_outside_any_step_with_the_code_now_deployed(
    workerflow_harness, define
):
    calls = []
    broken = {"on": True}

    def execute(self):
        value = self.run("fetch", lambda: calls.append(1) or [1, 2])
        if broken["on"]:
            return value["first"]
        return value[0]

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    instance = refreshed(instance)
    assert (instance.status, instance.error_name, instance.error_step_id) == (
        "failed",
        "TypeError",
        "",
    )

    broken["on"] = False
    instance.retry()
    workerflow_harness.drain()

    instance = refreshed(instance)
    assert (instance.status, instance.result) == ("completed", 1)
    assert calls == [1]


def test_retry__leaves_a_step_failure_the_workflow_caught_as_it_was(workerflow_harness, define):
    calls = {"caught": 0}
    broken = {"on": True}

    def caught():
        calls["caught"] += 1
        raise ValueError("declined")

    def execute(self):
        with contextlib.suppress(workerflow.MaxAttemptsExceededError):
            self.run("caught", caught, max_attempts=1)
        if broken["on"]:
            raise RuntimeError("bug after the step")
        return "done"

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    broken["on"] = False
    instance.retry()
    workerflow_harness.drain()

    assert refreshed(instance).status == "completed"
    assert calls == {"caught": 1}
    assert step(instance, "caught").state == "failed"


@pytest.mark.parametrize("status", ["pending", "running", "paused", "completed", "cancelled"])
def test_retry__refuses_an_instance_that_is_not_failed_naming_its_status(
    workerflow_harness, define, status
):
    def execute(self):
        self.sleep("nap", timedelta(hours=1))

    instance = workerflow.start(define(execute))
    if status != "pending":
        workerflow_harness.drain()
    if status == "paused":
        instance.pause()
    elif status == "completed":
        workerflow_harness.advance(timedelta(hours=2))
    elif status == "cancelled":
        instance.cancel()
    assert refreshed(instance).status == status
    events_before = WorkflowEvent.objects.filter(instance=instance).count()

    with pytest.raises(WorkflowStateError, match=f"its status is '{status}'"):
        workerflow.retry(instance)

    assert refreshed(instance).status == status
    assert WorkflowEvent.objects.filter(instance=instance).count() == events_before


def test_retry__refuses_a_reason_that_is_not_a_string(workerflow_harness, define):
    instance = workerflow.start(define(lambda self: 1 / 0))
    workerflow_harness.drain()
    with pytest.raises(WorkflowInputError, match="reason must be a string"):
        workerflow.retry(instance, reason=42)
    assert refreshed(instance).status == "failed"


def test_retry_and_fork__have_their_own_permissions():
    from django.contrib.auth.models import Permission

    codenames = set(
        Permission.objects.filter(content_type__app_label="workerflow").values_list(
            "codename", flat=True
        )
    )
    assert {"retry_workflowinstance", "fork_workflowinstance"} <= codenames


def test_retry__keeps_the_largest_budget_within_what_the_database_stores(
    workerflow_harness, define
):
    """A step with the largest ``max_attempts`` that failed at once retries without
    overflowing the column (PostgreSQL raised ``DataError``) (issue 20, item 8)."""
    from django_workerflow.values.storable import MAX_INTEGER

    broken = {"on": True}

    def declined():
        if broken["on"]:
            raise workerflow.NonRetryableStepError("declined")
        return "paid"

    def execute(self):
        return self.run("charge", declined, max_attempts=MAX_INTEGER)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert refreshed(instance).status == "failed"

    broken["on"] = False
    workerflow.retry(instance)
    assert step(instance, "charge").max_attempts == MAX_INTEGER
    workerflow_harness.drain()
    assert (refreshed(instance).status, instance.result) == ("completed", "paid")
    assert _attempts(instance, "charge") == [1, 2]


def test_retry__one_retry_recovers_an_all_whose_two_branches_failed(workerflow_harness, define):
    """Both failed branches reopen with one retry, not one retry per branch (issue 20,
    item 6); a branch that succeeded does not run again."""
    calls = {"a": 0, "b": 0, "ok": 0}
    broken = {"on": True}

    def branch(name):
        def callback():
            calls[name] += 1
            if broken["on"]:
                raise RuntimeError(f"{name} down")
            return name

        return callback

    def execute(self):
        return self.all(
            lambda: self.run("a", branch("a"), max_attempts=1),
            lambda: self.run("ok", lambda: calls.__setitem__("ok", calls["ok"] + 1) or "ok"),
            lambda: self.run("b", branch("b"), max_attempts=1),
        )

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    instance = refreshed(instance)
    assert (instance.status, instance.error_step_id, instance.other_error_step_ids) == (
        "failed",
        "a",
        ["b"],
    )

    broken["on"] = False
    workerflow.retry(instance)
    assert refreshed(instance).other_error_step_ids is None
    workerflow_harness.drain()
    assert (refreshed(instance).status, instance.result) == ("completed", ["a", "ok", "b"])
    assert calls == {"a": 2, "b": 2, "ok": 1}
