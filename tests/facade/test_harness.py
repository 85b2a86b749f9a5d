"""The test harness: a virtual clock, inline ticks, and on-commit callbacks in tests."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, models

import django_workerflow as workerflow
from django_workerflow.models import (
    InboundEvent,
    Step,
    StepEvent,
    WorkflowEvent,
    WorkflowInstance,
    WorkflowStatus,
    step_events_of,
)
from django_workerflow.signals import workflow_status_changed
from django_workerflow.testing import Harness
from django_workerflow.values import clock
from tests.support.instances import refreshed

T0 = datetime(2001, 2, 3, 4, 5, 6, 789000, tzinfo=UTC)
ENGINE_MODELS = (WorkflowInstance, Step, StepEvent, WorkflowEvent, InboundEvent)


def written_timestamps() -> dict[str, datetime]:
    """Every non-null timestamp in the engine's tables, labelled ``model.field#pk``."""
    found = {}
    for model in ENGINE_MODELS:
        fields = [
            f.attname for f in model._meta.concrete_fields if isinstance(f, models.DateTimeField)
        ]
        for row in model.objects.values("pk", *fields):
            for field in fields:
                if row[field] is not None:
                    found[f"{model.__name__}.{field}#{row['pk']}"] = row[field]
    return found


@pytest.fixture
def received_status_changes():
    received = []

    def receiver(sender, instance, status, previous_status, **kwargs):
        received.append((instance.key, status, previous_status))

    workflow_status_changed.connect(receiver, weak=False)
    yield received
    workflow_status_changed.disconnect(receiver)


def onboarding(calls: Counter):
    """A definition body that touches every kind of timestamp: a retry, a sleep, a wait."""

    def flaky():
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise ValueError("first attempt")
        return "ok"

    def execute(self):
        self.run("flaky", flaky)
        self.sleep("nap", timedelta(hours=1))
        return self.wait("answer", "answered", timeout=timedelta(days=1))

    return execute


# Timestamps ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_harness__every_timestamp_written_is_the_virtual_time(define):
    calls = Counter()
    definition = define(onboarding(calls))
    retry_at = T0 + timedelta(seconds=0.25)
    woke_at = retry_at + timedelta(hours=1)
    answered_at = woke_at + timedelta(seconds=30)

    with Harness(start=T0) as harness:
        instance = workerflow.start(definition, key="timestamps")
        assert written_timestamps() == {
            f"WorkflowInstance.alarm_at#{instance.pk}": T0,
            f"WorkflowInstance.admitted_at#{instance.pk}": T0,
            f"WorkflowInstance.created_at#{instance.pk}": T0,
            f"WorkflowInstance.updated_at#{instance.pk}": T0,
            f"WorkflowEvent.recorded_at#{instance.workflow_events.get().pk}": T0,
        }
        harness.drain()
        harness.advance(0.25)
        harness.advance(timedelta(hours=1))
        harness.advance(30)
        event = workerflow.send_event(instance, "answered", "yes")
        harness.drain()

    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.COMPLETED
    allowed = {T0, retry_at, woke_at, woke_at + timedelta(days=1), answered_at}
    stray = {label: value for label, value in written_timestamps().items() if value not in allowed}
    assert stray == {}
    assert (instance.created_at, instance.finished_at, instance.updated_at) == (
        T0,
        answered_at,
        answered_at,
    )
    flaky, nap, answer = Step.objects.order_by("created_at")
    assert (flaky.created_at, flaky.resolved_at) == (T0, retry_at)
    assert (nap.created_at, nap.wake_at, nap.resolved_at) == (retry_at, woke_at, woke_at)
    assert (answer.created_at, answer.timeout_at, answer.resolved_at) == (
        woke_at,
        woke_at + timedelta(days=1),
        answered_at,
    )
    event.refresh_from_db()
    assert (event.created_at, event.claimed_at) == (answered_at, answered_at)
    assert [e.recorded_at for e in step_events_of(instance, [flaky])] == [
        T0,
        T0,
        retry_at,
        retry_at,
    ]
    assert StepEvent.objects.get(step=flaky, type="attempt_failed").next_attempt_at == retry_at
    assert list(instance.workflow_events.values_list("type", "recorded_at")) == [
        ("created", T0),
        ("started", T0),
        ("completed", answered_at),
    ]


def test_harness__now_in_execute_is_the_virtual_time(define, workerflow_harness):
    seen = []

    def execute(self):
        seen.append(self.now())
        self.sleep("nap", 90)
        seen.append(self.now())

    workerflow.start(define(execute))
    start = workerflow_harness.now()
    workerflow_harness.drain()
    workerflow_harness.advance(90)

    # Not recorded: the replay reads the clock again.
    later = start + timedelta(seconds=90)
    assert seen == [start, later, later]


def test_harness__pause_resume_and_cancel_timestamps_are_virtual(define, db):
    definition = define(lambda self: self.wait("go", "go"))

    with Harness(start=T0) as harness:
        instance = workerflow.start(definition)
        harness.drain()
        harness.clock.advance(timedelta(minutes=1))
        instance.pause()
        harness.clock.advance(timedelta(minutes=1))
        instance.resume()
        harness.clock.advance(timedelta(minutes=1))
        instance.cancel(reason="done testing")

    minutes = [T0 + timedelta(minutes=n) for n in range(4)]
    assert list(instance.workflow_events.values_list("type", "recorded_at")) == [
        ("created", minutes[0]),
        ("started", minutes[0]),
        ("paused", minutes[1]),
        ("resumed", minutes[2]),
        ("cancelled", minutes[3]),
    ]
    assert refreshed(instance).finished_at == minutes[3]
    assert set(written_timestamps().values()) <= set(minutes) | {T0 + timedelta(seconds=60)}


# The clock and the ticks ----------------------------------------------------------------


def test_harness__nothing_runs_until_drain(define, workerflow_harness):
    calls = Counter()
    instance = workerflow.start(define(lambda self: self.run("a", lambda: calls.update("a"))))

    assert calls["a"] == 0
    assert refreshed(instance).status == WorkflowStatus.PENDING
    assert workerflow_harness.drain() == 1
    assert calls["a"] == 1
    assert refreshed(instance).status == WorkflowStatus.COMPLETED


def test_harness__advance_fires_a_sleep_exactly_when_due_and_not_before(define, workerflow_harness):
    instance = workerflow.start(define(lambda self: self.sleep("nap", 10)))
    workerflow_harness.drain()
    due = workerflow_harness.now() + timedelta(seconds=10)

    assert workerflow_harness.advance(timedelta(seconds=10) - timedelta(microseconds=1)) == 0
    assert Step.objects.get(step_id="nap").state == "waiting"
    assert refreshed(instance).status == WorkflowStatus.RUNNING

    assert workerflow_harness.advance(timedelta(microseconds=1)) == 1
    assert workerflow_harness.now() == due
    nap = Step.objects.get(step_id="nap")
    assert (nap.state, nap.resolved_at) == ("elapsed", due)
    assert refreshed(instance).status == WorkflowStatus.COMPLETED


def test_harness__advance_fires_sleeps_in_due_order(define, workerflow_harness):
    order = []

    def sleeper(seconds):
        def execute(self):
            self.sleep("nap", seconds)
            self.run("log", lambda: order.append(seconds))

        return execute

    for seconds in (30, 10, 20):
        workerflow.start(define(sleeper(seconds)))
    workerflow_harness.drain()

    assert workerflow_harness.advance(15) == 1
    assert order == [10]
    assert workerflow_harness.advance(60) == 2
    assert order == [10, 20, 30]


def test_harness__drain_returns_the_number_of_ticks_it_ran(define, workerflow_harness):
    definition = define(lambda self: self.sleep("nap", 5))

    assert workerflow_harness.drain() == 0
    for _ in range(3):
        workerflow.start(definition)
    assert workerflow_harness.drain() == 3
    assert workerflow_harness.drain() == 0
    assert workerflow_harness.advance(5) == 3
    assert workerflow_harness.ticks == 6


def test_harness__drain_ticks_again_for_each_due_retry(define, workerflow_harness):
    attempts = Counter()

    def flaky():
        attempts["flaky"] += 1
        if attempts["flaky"] < 3:
            raise ValueError("not yet")

    workerflow.start(define(lambda self: self.run("flaky", flaky)))

    assert workerflow_harness.drain() == 1
    assert workerflow_harness.advance(0.25) == 1
    assert workerflow_harness.advance(0.5) == 1
    assert attempts["flaky"] == 3


def test_harness__drain_refuses_to_loop_forever(define, db):
    def execute(self):
        def always_fails():
            raise ValueError("again")

        self.run("loop", always_fails, max_attempts=1_000_000, backoff=lambda attempt: 0)

    definition = define(execute)

    with Harness(max_ticks=3) as harness:
        workerflow.start(definition)
        with pytest.raises(RuntimeError, match="3 ticks"):
            harness.drain()


def test_harness__fixture_installs_a_virtual_clock_and_restores_it(workerflow_harness):
    assert isinstance(workerflow_harness, Harness)
    assert clock.get_clock() is workerflow_harness.clock
    before = workerflow_harness.now()
    workerflow_harness.advance(timedelta(days=2))
    assert workerflow_harness.now() - before == timedelta(days=2)
    assert clock.now() == workerflow_harness.now()


def test_harness__restores_the_previous_clock_on_exit(db):
    previous = clock.get_clock()

    with Harness(start=T0) as harness:
        assert clock.now() == T0
        harness.advance(1)
        assert clock.now() == T0 + timedelta(seconds=1)

    assert clock.get_clock() is previous


def test_harness__restores_the_previous_clock_when_the_block_raises(db):
    previous = clock.get_clock()

    with pytest.raises(ZeroDivisionError), Harness(start=T0):
        1 / 0  # noqa: B018 - raising inside the block is the point

    assert clock.get_clock() is previous


# Signals and transactions -------------------------------------------------------------


def test_harness__delivers_signals_inside_a_django_db_test(
    define, workerflow_harness, received_status_changes
):
    assert connection.in_atomic_block  # the test's wrapping transaction
    workerflow.start(define(lambda self: "done"), key="signalled")
    workerflow_harness.drain()

    assert received_status_changes == [
        ("signalled", "pending", None),
        ("signalled", "running", "pending"),
        ("signalled", "completed", "running"),
    ]


@pytest.mark.django_db
def test_harness__delivers_pending_signals_on_exit(define, received_status_changes):
    definition = define(lambda self: None)

    with Harness():
        workerflow.start(definition, key="on-exit")
        assert received_status_changes == []

    assert received_status_changes == [("on-exit", "pending", None)]


def test_harness__drives_a_workflow_in_a_transactional_db_test(
    transactional_db, define, workerflow_harness, received_status_changes
):
    calls = Counter()
    instance = workerflow.start(define(onboarding(calls)), key="transactional")
    assert not connection.in_atomic_block

    workerflow_harness.drain()
    workerflow_harness.advance(0.25)
    workerflow_harness.advance(timedelta(hours=1))
    workerflow.send_event(instance, "answered", {"score": 9})
    workerflow_harness.drain()

    assert refreshed(instance).result == {"score": 9}
    assert calls["flaky"] == 2
    assert received_status_changes == [
        ("transactional", "pending", None),
        ("transactional", "running", "pending"),
        ("transactional", "completed", "running"),
    ]


@pytest.mark.django_db
def test_harness__drives_a_workflow_in_a_django_db_test(define, workerflow_harness):
    calls = Counter()
    instance = workerflow.start(define(onboarding(calls)))

    workerflow_harness.drain()
    workerflow_harness.advance(0.25)
    workerflow_harness.advance(timedelta(hours=1))
    workerflow.send_event(instance, "answered", {"score": 9})
    workerflow_harness.drain()

    assert refreshed(instance).result == {"score": 9}
    assert calls["flaky"] == 2


@pytest.mark.django_db(transaction=True)
def test_harness__every_timestamp_is_virtual_in_a_transactional_test(define):
    calls = Counter()
    definition = define(onboarding(calls))

    with Harness(start=T0) as harness:
        instance = workerflow.start(definition)
        harness.drain()
        harness.advance(0.25)
        harness.advance(timedelta(hours=1))
        workerflow.send_event(instance, "answered", "yes")
        harness.drain()

    assert refreshed(instance).status == WorkflowStatus.COMPLETED
    retry_at = T0 + timedelta(seconds=0.25)
    woke_at = retry_at + timedelta(hours=1)
    allowed = {T0, retry_at, woke_at, woke_at + timedelta(days=1)}
    assert {k: v for k, v in written_timestamps().items() if v not in allowed} == {}


@pytest.mark.django_db(transaction=True)
def test_harness__ticks_take_the_production_write_path_in_a_transactional_test(
    define, workerflow_harness
):
    statements = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    workerflow.start(define(lambda self: [self.run(f"step-{n}", lambda n=n: n) for n in range(3)]))
    with connection.execute_wrapper(record):
        workerflow_harness.drain()

    if connection.vendor == "sqlite":
        # The first start and each success fused with the next start: each its own BEGIN
        # IMMEDIATE transaction, as in production (not a savepoint of a wrapping transaction).
        # The last success commits with the settle, as a savepoint of the settle's own.
        assert sum(sql == "BEGIN IMMEDIATE" for sql in statements) >= 3
        assert sum(sql.startswith("SAVEPOINT") for sql in statements) == 1
    else:
        # The first start marker commits with the tick's claim, as in production (issue 39);
        # the later starts ride with the previous step's success: all synchronous.
        assert sum("no_flush" in sql for sql in statements) == 0
        assert sum("workerflow_succeed_and_start" in sql for sql in statements) == 2
