"""Races between threads on PostgreSQL: start, events, pause and cancel against a tick.

Each thread uses its own database connection, so these tests need real transactions
(``transactional_db``) and a database that lets writers run concurrently.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow.models import (
    InboundEvent,
    Step,
    WorkflowEvent,
    WorkflowInstance,
    WorkflowStatus,
    step_events_of,
)
from django_workerflow.runtime.tick import tick as run_tick
from tests.support.instances import refreshed
from tests.support.threads import in_threads

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (WORKERFLOW_DB=postgres): SQLite serialises all writers",
    ),
]

THREAD_TIMEOUT = 60
# Seeds the jitter, so a failing interleaving can be replayed.
rng = random.Random(20260319)


def jitter(upper: float) -> None:
    time.sleep(rng.uniform(0, upper))


def workflow_event_types(instance: WorkflowInstance) -> list[str]:
    return list(
        WorkflowEvent.objects.filter(instance=instance)
        .order_by("recorded_at", "id")
        .values_list("type", flat=True)
    )


def step_history(instance: WorkflowInstance) -> dict[str, list[str]]:
    """Each step's event types, stored and derived (a run step's first start and its
    success are read from its row)."""
    history: dict[str, list[str]] = {}
    for event in step_events_of(instance):
        history.setdefault(event.step.step_id, []).append(event.type)
    return history


# start ---------------------------------------------------------------------------------


def test_start__racing_threads_on_one_key_create_one_instance(transactional_db, define):
    definition = define(lambda self: self.input)
    threads = 8

    for iteration in range(10):
        key = f"start-race-{iteration}"
        barrier = threading.Barrier(threads)

        def start(number: int, key: str = key, barrier: threading.Barrier = barrier) -> int:
            barrier.wait()
            return workerflow.start(definition, key=key, input={"thread": number}).pk

        pks = in_threads(*[lambda n=n: start(n) for n in range(threads)])

        assert len(set(pks)) == 1
        instance = WorkflowInstance.objects.get(key=key)
        assert instance.pk == pks[0]
        assert workflow_event_types(instance) == ["created"]
    assert WorkflowInstance.objects.count() == 10


# send_event against a tick -------------------------------------------------------------


def test_send_event__racing_a_tick_that_creates_the_wait_is_never_lost(
    transactional_db, define, workerflow_harness
):
    prepared: dict[str, threading.Event] = {}
    linger: dict[str, float] = {}

    def execute(self):
        def prepare() -> None:
            prepared[self.key].set()
            # The event is sent now; lingering a random moment makes it land before,
            # during or after the transaction that creates the wait step.
            time.sleep(linger[self.key])

        self.run("prepare", prepare)
        return self.wait("answer", "answered")

    definition = define(execute)
    claimed_at_once = Counter()

    for iteration in range(80):
        key = f"event-race-{iteration}"
        prepared[key] = threading.Event()
        linger[key] = rng.uniform(0, 0.006)
        instance = workerflow.start(definition, key=key)

        def tick(pk: int = instance.pk) -> None:
            run_tick(pk)

        def send(key: str = key, iteration: int = iteration) -> InboundEvent:
            assert prepared[key].wait(THREAD_TIMEOUT)
            return workerflow.send_event(key, "answered", {"n": iteration})

        _, sent = in_threads(tick, send)
        claimed_at_once[sent.claimed_by_id is not None] += 1
        workerflow_harness.drain()

        instance = refreshed(instance)
        assert instance.status == WorkflowStatus.COMPLETED, (iteration, instance.status)
        assert instance.result == {"n": iteration}
        event = InboundEvent.objects.get(instance=instance)
        assert event.claimed_by == Step.objects.get(instance=instance, step_id="answer")
        assert step_history(instance)["answer"] == ["wait_waiting", "wait_satisfied"]
    # Both sides of the race were exercised: queued then claimed, and claimed on arrival.
    assert claimed_at_once[True], claimed_at_once
    assert claimed_at_once[False], claimed_at_once


# pause / cancel against a tick ----------------------------------------------------------

STEPS = 30


def counting_steps(calls: Counter, started: dict[str, threading.Event]):
    """A definition body of STEPS sequential run steps that count their calls."""

    def execute(self):
        def step(number: int) -> int:
            calls[(self.key, number)] += 1
            started[self.key].set()
            return number

        return [self.run(f"s{n}", lambda n=n: step(n)) for n in range(STEPS)]

    return execute


def assert_prefix_of_steps_ran_once(instance: WorkflowInstance, calls: Counter) -> int:
    """Steps form a prefix s0..sk, each attempted once and succeeded; return its length."""
    steps = list(
        Step.objects.filter(instance=instance).order_by("id").values_list("step_id", "state")
    )
    count = len(steps)
    assert [step_id for step_id, _ in steps] == [f"s{n}" for n in range(count)]
    assert {state for _, state in steps} <= {"succeeded"}, steps
    history = step_history(instance)
    for n in range(STEPS):
        expected = 1 if n < count else 0
        assert calls[(instance.key, n)] == expected, (n, count)
        if n < count:
            assert history[f"s{n}"] == ["attempt_started", "attempt_succeeded"]
    return count


def test_pause__racing_a_tick_leaves_a_paused_instance_with_a_consistent_history(
    transactional_db, define, workerflow_harness
):
    calls: Counter = Counter()
    started: dict[str, threading.Event] = {}
    definition = define(counting_steps(calls, started))

    for iteration in range(15):
        key = f"pause-race-{iteration}"
        started[key] = threading.Event()
        instance = workerflow.start(definition, key=key)

        def tick(pk: int = instance.pk) -> None:
            run_tick(pk)

        def pause(key: str = key) -> bool:
            assert started[key].wait(THREAD_TIMEOUT)
            jitter(0.01)
            return workerflow.pause(key)

        _, paused = in_threads(tick, pause)

        instance = refreshed(instance)
        if not paused:  # the tick finished every step before the pause arrived
            assert instance.status == WorkflowStatus.COMPLETED
            continue
        assert instance.status == WorkflowStatus.PAUSED
        assert instance.alarm_at is None
        assert instance.lease_token is None
        assert workflow_event_types(instance) == ["created", "started", "paused"]
        # A pause that lands after the last step's outcome but before the tick settles
        # leaves every step done (steps got fast enough with issue 15 for that to happen).
        assert 1 <= assert_prefix_of_steps_ran_once(instance, calls) <= STEPS
        assert workerflow_harness.drain() == 0

        instance.resume()
        workerflow_harness.drain()

        instance = refreshed(instance)
        assert instance.status == WorkflowStatus.COMPLETED
        assert instance.result == list(range(STEPS))
        assert assert_prefix_of_steps_ran_once(instance, calls) == STEPS
        assert workflow_event_types(instance) == [
            "created",
            "started",
            "paused",
            "resumed",
            "completed",
        ]


def test_cancel__racing_a_tick_means_no_step_starts_afterwards(
    transactional_db, define, workerflow_harness
):
    calls: Counter = Counter()
    started: dict[str, threading.Event] = {}
    definition = define(counting_steps(calls, started))

    for iteration in range(15):
        key = f"cancel-race-{iteration}"
        started[key] = threading.Event()
        instance = workerflow.start(definition, key=key)

        def tick(pk: int = instance.pk) -> None:
            run_tick(pk)

        def cancel(key: str = key) -> tuple[bool, int]:
            assert started[key].wait(THREAD_TIMEOUT)
            jitter(0.01)
            cancelled = workerflow.cancel(key, reason="race")
            return cancelled, Step.objects.filter(instance__key=key).count()

        _, (cancelled, steps_at_cancel) = in_threads(tick, cancel)

        instance = refreshed(instance)
        if not cancelled:
            assert instance.status == WorkflowStatus.COMPLETED
            continue
        assert instance.status == WorkflowStatus.CANCELLED
        assert instance.alarm_at is None
        assert instance.lease_token is None
        # Once the cancel committed, no step was created any more.
        steps = Step.objects.filter(instance=instance).count()
        assert steps == steps_at_cancel
        assert workflow_event_types(instance) == ["created", "started", "cancelled"]
        assert workerflow_harness.drain() == 0
        assert Step.objects.filter(instance=instance).count() == steps
        assert sum(count for (k, _), count in calls.items() if k == key) == steps


# Two ticks ----------------------------------------------------------------------------


def test_tick__two_racing_ticks_run_each_step_once(transactional_db, define, workerflow_harness):
    calls: Counter = Counter()
    started: dict[str, threading.Event] = {}
    definition = define(counting_steps(calls, started))

    for iteration in range(15):
        key = f"tick-race-{iteration}"
        started[key] = threading.Event()
        instance = workerflow.start(definition, key=key)
        barrier = threading.Barrier(2)

        def tick(pk: int = instance.pk, barrier: threading.Barrier = barrier) -> str:
            barrier.wait()
            return run_tick(pk).outcome

        outcomes = in_threads(tick, tick)
        workerflow_harness.drain()

        assert "completed" in outcomes
        instance = refreshed(instance)
        assert instance.status == WorkflowStatus.COMPLETED
        assert instance.result == list(range(STEPS))
        assert assert_prefix_of_steps_ran_once(instance, calls) == STEPS
        assert workflow_event_types(instance) == ["created", "started", "completed"]
