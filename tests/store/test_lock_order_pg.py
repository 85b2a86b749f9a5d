"""The lock order, proven with racing threads on PostgreSQL: no pair of operations on a
family of instances deadlocks (docs/concepts.md#the-lock-order).

Each race runs many times with a seeded jitter; PostgreSQL reports a deadlock as
``deadlock detected`` (the victim's transaction fails), which a thread re-raises here.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow import tracing
from django_workerflow.models import AdmissionGate, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime.tick import tick
from django_workerflow.values.clock import now
from tests.support.instances import status_of as status
from tests.support.threads import in_threads

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (WORKERFLOW_DB=postgres): SQLite serialises all writers",
    ),
]

rng = random.Random(20261201)


def jitter(upper: float = 0.004) -> None:
    time.sleep(rng.uniform(0, upper))


def family(define, child_execute):
    """A parent that waits for one child; the child runs ``child_execute``."""
    child = define(child_execute)

    def parent(self):
        return self.child("only-child", child, key=f"{self.key}/child")

    return define(parent)


def started_family(parent, key: str) -> tuple[str, str]:
    """Start the parent, tick it (its child starts), tick the child (it waits)."""
    workerflow.start(parent, key=key)
    tick(WorkflowInstance.objects.get(key=key).pk)
    child_key = f"{key}/child"
    tick(WorkflowInstance.objects.get(key=child_key).pk)
    return key, child_key


def wait_for_go(self):
    return self.wait("go", "go")


def test_cancel_parent__racing_cancel_of_its_child__never_deadlocks(transactional_db, define):
    parent = family(define, wait_for_go)
    for iteration in range(40):
        key, child_key = started_family(parent, f"cancel-pair-{iteration}")
        assert status(child_key) == WorkflowStatus.RUNNING
        barrier = threading.Barrier(2)

        def cancel(target: str, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            jitter()
            return workerflow.cancel(target, reason="race")

        in_threads(lambda key=key: cancel(key), lambda key=child_key: cancel(key))

        assert status(key) == WorkflowStatus.CANCELLED
        assert status(child_key) == WorkflowStatus.CANCELLED


def test_cancel_parent__racing_the_tick_that_completes_its_child__never_deadlocks(
    transactional_db, define
):
    parent = family(define, wait_for_go)
    completed = 0
    for iteration in range(30):
        key, child_key = started_family(parent, f"tick-vs-cancel-{iteration}")
        workerflow.send_event(child_key, "go", {"n": iteration})
        child_pk = WorkflowInstance.objects.get(key=child_key).pk
        barrier = threading.Barrier(2)

        def cancel_parent(key: str = key, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            jitter()
            return workerflow.cancel(key, reason="race")

        def tick_child(child_pk: int = child_pk, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            jitter()
            tick(child_pk)

        in_threads(cancel_parent, tick_child)

        assert status(key) == WorkflowStatus.CANCELLED
        # The child either completed first (its success kept) or was cancelled first.
        assert status(child_key) in (WorkflowStatus.COMPLETED, WorkflowStatus.CANCELLED)
        completed += status(child_key) == WorkflowStatus.COMPLETED
    print(f"\nchild completed before the cancel in {completed} of 30 races")


def test_cancel_two_parents__whose_children_share_a_gate__never_deadlocks(
    transactional_db, define, define_with
):
    gated = define_with(wait_for_go, max_concurrency=2, concurrency_key=lambda self: "shared")

    def parent(self):
        first = self.start_child("c0", gated, key=f"{self.key}/c0")
        self.wait("more", "more")
        rest = [self.start_child(f"c{n}", gated, key=f"{self.key}/c{n}") for n in (1, 2)]
        return [self.wait_child(f"wait-{key}", key) for key in [first, *rest]]

    parent_definition = define(parent)
    for iteration in range(25):
        keys = [f"gate-{iteration}-a", f"gate-{iteration}-b"]
        # Each parent's first child takes one of the two slots; the later ones queue.
        for key in keys:
            workerflow.start(parent_definition, key=key)
            tick(WorkflowInstance.objects.get(key=key).pk)
        for key in keys:
            workerflow.send_event(key, "more")
            tick(WorkflowInstance.objects.get(key=key).pk)
        children = WorkflowInstance.objects.filter(
            key__startswith=f"gate-{iteration}-", parent__isnull=False
        )
        assert sorted(children.filter(admitted_at__isnull=False).values_list("key", flat=True)) == [
            f"{key}/c0" for key in keys
        ]
        assert children.filter(admitted_at__isnull=True).count() == 4
        barrier = threading.Barrier(2)

        def cancel(target: str, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            jitter()
            return workerflow.cancel(target, reason="race")

        in_threads(*[lambda key=key: cancel(key) for key in keys])

        for key in keys:
            assert status(key) == WorkflowStatus.CANCELLED
        assert (
            list(children.exclude(status=WorkflowStatus.CANCELLED).values_list("key", "status"))
            == []
        )
    assert AdmissionGate.objects.filter(definition_name=gated.name).count() == 1


def test_cancel__a_child_started_between_the_first_look_and_the_row_lock_is_cancelled_too(
    transactional_db, define, monkeypatch
):
    """cancel() looks for children before it locks the instance (the lock order takes the
    waiters first); a child the instance's own tick starts in between must not outlive it."""
    from django_workerflow.runtime import finishing, starting

    child = define(wait_for_go)
    parent = define(wait_for_go)
    workerflow.start(parent, key="late-parent")
    tick(WorkflowInstance.objects.get(key="late-parent").pk)
    first_look = finishing.lock_waiters

    def look_then_a_child_starts(pk: int) -> finishing.Followups:
        followups = first_look(pk)
        # Another connection, as the parent's tick would: committed before the lock.
        in_threads(
            lambda: starting.start(
                child, key="late-parent/child", input=None, version=None, parent_pk=pk
            )
        )
        return followups

    monkeypatch.setattr(finishing, "lock_waiters", look_then_a_child_starts)

    assert workerflow.cancel("late-parent", reason="race") is True

    assert status("late-parent") == WorkflowStatus.CANCELLED
    assert status("late-parent/child") == WorkflowStatus.CANCELLED


def test_an_event_holding_a_queued_row__when_a_finish_frees_a_slot__asks_for_admission_again(
    transactional_db, define_with, monkeypatch
):
    """An admission skips a queued row that another transaction holds (rule 3 of the lock
    order); an event that held the row meanwhile asks for admission again, so the freed slot
    is not left unused."""
    gated = define_with(wait_for_go, max_concurrency=1, concurrency_key=lambda self: "one")
    workerflow.start(gated, key="holder")
    tick(WorkflowInstance.objects.get(key="holder").pk)
    workerflow.start(gated, key="queued")
    queued = WorkflowInstance.objects.get(key="queued")
    tick(queued.pk)  # no free slot: it stays queued, with no alarm
    queued.refresh_from_db()
    assert (queued.admitted_at, queued.alarm_at) == (None, None)
    holding, finished = threading.Event(), threading.Event()
    trace_context = tracing.carrier

    def hold_the_row() -> str | None:
        # Called inside send_event's transaction, while it holds the queued row (once).
        if not holding.is_set():
            holding.set()
            assert finished.wait(30), "the cancel did not finish"
        return trace_context()

    monkeypatch.setattr(tracing, "carrier", hold_the_row)

    def cancel_the_holder() -> bool:
        assert holding.wait(30), "the event never took the queued row"
        try:
            return workerflow.cancel("holder", reason="frees the slot")
        finally:
            finished.set()

    in_threads(lambda: workerflow.send_event("queued", "early"), cancel_the_holder)

    queued.refresh_from_db()
    assert queued.admitted_at is None  # the finish's admission skipped the held row
    assert queued.alarm_at is not None
    assert queued.alarm_at <= now()
    tick(queued.pk)
    queued.refresh_from_db()
    assert queued.admitted_at is not None
