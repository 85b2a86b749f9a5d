"""A run step's first start and its success live on its row (``derived_attempt_events``):
not stored as step events, derived by the ``StepEvent`` view exactly as they were stored
before (the ``test_merge__`` tests pin the merge ``step_events_of`` did before the view, the
oracle of ``tests/models/test_step_event_view.py``).
Everything else a step records (later starts, failures, sleeps, waits) stays stored.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow.console.history import load_history
from django_workerflow.deploy.exports import export_history
from django_workerflow.models import (
    Step,
    StepEvent,
    StepEventType,
    StepState,
    StoredStepEvent,
    WorkflowStatus,
    step_events_of,
)
from django_workerflow.store import transactions
from django_workerflow.values.clock import now
from tests.models.step_history_oracle import merged_step_events

pytestmark = pytest.mark.django_db

STARTED = StepEventType.ATTEMPT_STARTED
SUCCEEDED = StepEventType.ATTEMPT_SUCCEEDED
FAILED = StepEventType.ATTEMPT_FAILED


def history(instance: Any) -> list[tuple[str, str, int | None]]:
    return [
        (event.step.step_id, event.type, event.attempt_number) for event in step_events_of(instance)
    ]


def test_run_steps__store_no_start_or_success_and_read_both_back_from_their_rows(define, harness):
    # "a" succeeds through the fused write (its success with b's start), "b" on its own.
    def execute(self):
        self.run("a", lambda: {"n": 1})
        return self.run("b", lambda: 2)

    instance = workerflow.start(define(execute))
    harness.drain()

    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.COMPLETED
    assert not StoredStepEvent.objects.filter(instance=instance).exists()
    a, b = Step.objects.filter(instance=instance).order_by("created_at", "id")
    assert (a.derived_attempt_events, b.derived_attempt_events) == (True, True)
    events = step_events_of(instance)
    assert [(e.step.step_id, e.type, e.attempt_number, e.result) for e in events] == [
        ("a", STARTED, 1, None),
        ("a", SUCCEEDED, 1, {"n": 1}),
        ("b", STARTED, 1, None),
        ("b", SUCCEEDED, 1, 2),
    ]
    assert [e.recorded_at for e in events] == [
        a.created_at,
        a.resolved_at,
        b.created_at,
        b.resolved_at,
    ]
    assert all(e.pk < 0 and e.instance_id == instance.pk for e in events)


def test_a_retried_step__its_first_start_and_last_success_derived_around_the_stored_attempts(
    define, harness
):
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] < 3:
            raise ValueError("down")
        return "up"

    instance = workerflow.start(
        define(lambda self: self.run("flaky", flaky, max_attempts=3, backoff=lambda n: 0))
    )
    harness.drain()

    stored = list(
        StoredStepEvent.objects.filter(instance=instance)
        .order_by("recorded_at", "id")
        .values_list("type", "attempt_number")
    )
    assert stored == [(FAILED, 1), (STARTED, 2), (FAILED, 2), (STARTED, 3)]
    assert history(instance) == [
        ("flaky", STARTED, 1),
        ("flaky", FAILED, 1),
        ("flaky", STARTED, 2),
        ("flaky", FAILED, 2),
        ("flaky", STARTED, 3),
        ("flaky", SUCCEEDED, 3),
    ]


def test_a_step_written_before_the_column__keeps_its_stored_events_and_stores_its_success(
    claimed_store,
):
    # A step some earlier version started (its start stored, the column false) and this
    # version finishes: its success is stored too, and nothing is derived twice.
    store, instance = claimed_store()
    record = store.create_started_run_step("old", parent_step_id=None, max_attempts=1)
    Step.objects.filter(pk=record.pk).update(derived_attempt_events=False)
    with connection.cursor() as cursor:
        transactions.insert_event(
            cursor, instance.pk, record.pk, record.created_at, STARTED, attempt_number=1
        )

    store.mark_attempt_succeeded("old", 1, '"done"')

    stored = list(StoredStepEvent.objects.filter(instance=instance).values_list("type", "result"))
    assert stored == [(STARTED, None), (SUCCEEDED, "done")]
    assert history(instance) == [("old", STARTED, 1), ("old", SUCCEEDED, 1)]


def test_a_step_written_before_the_column__stores_its_success_in_the_fused_write(
    claimed_store,
):
    store, instance = claimed_store()
    record = store.create_started_run_step("old", parent_step_id=None, max_attempts=1)
    Step.objects.filter(pk=record.pk).update(derived_attempt_events=False)

    store.defer_success("old", 1, "7")
    store.create_started_run_step("new", parent_step_id=None, max_attempts=1)

    stored = list(
        StoredStepEvent.objects.filter(instance=instance).values_list(
            "step__step_id", "type", "result"
        )
    )
    assert stored == [("old", SUCCEEDED, 7)]
    assert history(instance) == [("old", SUCCEEDED, 1), ("new", STARTED, 1)]


def unsaved_step(pk: int, step_id: str, state: str, at: datetime, **fields: Any) -> Step:
    """A step row as read back (never saved): a run step keeping its events unless told."""
    values: dict[str, Any] = {"type": "run", "attempt_count": 1, "derived_attempt_events": True}
    values.update(fields)
    return Step(pk=pk, instance_id=9, step_id=step_id, state=state, created_at=at, **values)


def stored_event(pk: int, step: Step, type: str, at: datetime, attempt: int | None) -> StepEvent:
    return StepEvent(
        pk=pk, instance_id=9, step=step, type=type, attempt_number=attempt, recorded_at=at
    )


def test_merge__at_one_instant__a_start_first_then_by_step_and_the_stored_order_kept():
    at = now()
    first = unsaved_step(1, "first", StepState.SUCCEEDED, at, attempt_count=2, resolved_at=at)
    second = unsaved_step(2, "second", StepState.RUNNING, at)
    old = unsaved_step(
        3, "old", StepState.SUCCEEDED, at, resolved_at=at, derived_attempt_events=False
    )
    # Stored at one instant, deliberately out of step order: the merge must not reorder them.
    stored = [
        stored_event(10, old, STARTED, at, 1),
        stored_event(11, first, FAILED, at, 1),
        stored_event(12, first, STARTED, at, 2),
        stored_event(13, old, SUCCEEDED, at, 1),
    ]

    merged = merged_step_events([first, second, old], stored)

    assert [(e.step.step_id, e.type, e.attempt_number, e.pk) for e in merged] == [
        ("first", STARTED, 1, None),
        ("second", STARTED, 1, None),
        ("old", STARTED, 1, 10),
        ("first", FAILED, 1, 11),
        ("first", STARTED, 2, 12),
        ("first", SUCCEEDED, 2, None),
        ("old", SUCCEEDED, 1, 13),
    ]


def test_merge__derives_no_event_an_earlier_release_also_stored():
    # A rolling deploy: this release started the step (nothing stored), an earlier one took
    # it over, retried it and stored the retry's start and its success.
    at = now()
    step = unsaved_step(1, "s", StepState.SUCCEEDED, at, attempt_count=2, resolved_at=at)
    stored = [
        stored_event(10, step, FAILED, at, 1),
        stored_event(11, step, STARTED, at, 2),
        stored_event(12, step, SUCCEEDED, at, 2),
    ]

    merged = merged_step_events([step], stored)

    assert [(e.type, e.attempt_number, e.pk) for e in merged] == [
        (STARTED, 1, None),
        (FAILED, 1, 10),
        (STARTED, 2, 11),
        (SUCCEEDED, 2, 12),
    ]


def test_merge__by_time_first():
    at = now()
    second = timedelta(seconds=1)
    step = unsaved_step(5, "s", StepState.SUCCEEDED, at, resolved_at=at + second)
    nap = unsaved_step(
        1,
        "nap",
        StepState.ELAPSED,
        at - second,
        type="sleep",
        resolved_at=at + 2 * second,
        derived_attempt_events=False,
    )
    stored = [
        stored_event(1, nap, StepEventType.SLEEP_WAITING, nap.created_at, None),
        stored_event(2, nap, StepEventType.SLEEP_ELAPSED, nap.resolved_at, None),
    ]

    merged = merged_step_events([nap, step], stored)

    assert [(e.step.step_id, e.type) for e in merged] == [
        ("nap", StepEventType.SLEEP_WAITING),
        ("s", STARTED),
        ("s", SUCCEEDED),
        ("nap", StepEventType.SLEEP_ELAPSED),
    ]


def test_merge__derives_nothing_for_a_fork_s_copies(define, harness):
    # A fork copies steps without their events; its copies show none, as before.
    def execute(self):
        self.run("a", lambda: 1)
        return self.run("b", lambda: 2)

    source = workerflow.start(define(execute))
    harness.drain()
    fork = workerflow.fork(source, from_step="b")
    copied = Step.objects.get(instance=fork, step_id="a")

    assert copied.derived_attempt_events is False
    assert [e for e in step_events_of(fork) if e.step_id == copied.pk] == []


def test_console_and_export__show_the_derived_attempts(define, harness):
    def execute(self):
        self.run("a", lambda: "x")
        self.sleep("nap", timedelta(seconds=0))
        return self.run("b", lambda: "y")

    instance = workerflow.start(define(execute))
    harness.drain()
    instance.refresh_from_db()

    page = load_history(instance, now())
    attempts = {node.step.step_id: node.attempts for node in page.nodes}
    assert [(a.number, a.outcome) for a in attempts["a"]] == [(1, StepState.SUCCEEDED)]
    assert [(a.number, a.outcome) for a in attempts["b"]] == [(1, StepState.SUCCEEDED)]
    assert page.step_event_count == 6
    groups = {group.node.step.step_id: len(group.events) for group in page.step_event_groups}
    assert groups == {"a": 2, "nap": 2, "b": 2}

    exported = {step["step_id"]: step["events"] for step in export_history(instance)["steps"]}
    assert [(e["type"], e["attempt_number"], e["result"]) for e in exported["a"]] == [
        (STARTED, 1, None),
        (SUCCEEDED, 1, "x"),
    ]
    assert all(isinstance(e["recorded_at"], str) for e in exported["a"])
