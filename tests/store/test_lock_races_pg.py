"""Destructive and housekeeping work against live work, raced with threads on PostgreSQL
(issue 36, items 3 and 5): purge against retry() and fork(), the sweeper against cancel(),
retry() against cancel(). Zero deadlocks, zero lost or doubled steps over repeated races.

The first tests of each pair are deterministic: one transaction holds a row while the other
operation runs, and a third connection watches ``pg_stat_activity`` until that operation
has either returned or is waiting for a lock. Then the races repeat with a barrier and a
seeded jitter; PostgreSQL reports a deadlock as ``deadlock detected`` in the victim's
thread, which re-raises it here.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

import django_workerflow as workerflow
from django_workerflow.models import Step, WorkflowEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime import purge, sweeping
from django_workerflow.runtime.tick import tick
from django_workerflow.store import locks
from django_workerflow.values.clock import now
from tests.support.instances import status_of as status
from tests.support.threads import in_threads

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (WORKERFLOW_DB=postgres): SQLite serialises all writers",
    ),
]
RACES = 30
rng = random.Random(20261205)
#: Run counts of the child's work step, per instance key (threads share the process).
runs: dict[str, int] = {}
failing = {"on": True}


def jitter(upper: float = 0.004) -> None:
    time.sleep(rng.uniform(0, upper))


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def waits_for_a_lock(pid: int) -> bool:
    """Whether the backend ``pid`` is waiting for a lock (read on a connection of its own)."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def while_held(
    hold: Callable[[], Any], operation: Callable[[], Any], timeout: float = 10.0
) -> tuple[Any, bool]:
    """Run ``hold`` in a transaction of another thread, then ``operation`` here while that
    transaction is open; commit it once ``operation`` returned or waits for a lock. The
    result of ``operation``, and whether it waited."""
    held, done = threading.Event(), threading.Event()
    pid: list[int] = []
    waited = [False]

    def holder() -> None:
        with transaction.atomic():
            hold()
            held.set()
            deadline = time.monotonic() + timeout
            while not done.is_set() and time.monotonic() < deadline:
                if pid and waits_for_a_lock(pid[0]):
                    waited[0] = True
                    break
                time.sleep(0.005)

    thread = threading.Thread(target=lambda: _closing(holder), daemon=True)
    thread.start()
    assert held.wait(timeout)
    pid.append(backend_pid())
    try:
        result = operation()
    finally:
        done.set()
        thread.join(timeout)
    return result, waited[0]


def _closing(target: Callable[[], Any]) -> None:
    try:
        target()
    finally:
        connection.close()


def work(self):
    def body():
        runs[self.key] = runs.get(self.key, 0) + 1
        if failing["on"]:
            raise RuntimeError("first attempt fails")
        return "done"

    return self.run("work", body, max_attempts=1)


def wait_for_go(self):
    return self.wait("go", "go")


@pytest.fixture(autouse=True)
def fresh_counts():
    runs.clear()
    failing["on"] = True


def failed_family(define, key: str) -> tuple[str, str]:
    """A parent failed because its child failed: the child's one work attempt raised."""
    child = define(work, name=f"{key}-child")

    def parent(self):
        return self.child("only-child", child, key=f"{self.key}/child")

    parent_definition = define(parent, name=f"{key}-parent")
    workerflow.start(parent_definition, key=key)
    tick(WorkflowInstance.objects.get(key=key).pk)
    child_key = f"{key}/child"
    tick(WorkflowInstance.objects.get(key=child_key).pk)
    tick(WorkflowInstance.objects.get(key=key).pk)
    assert status(key) == status(child_key) == WorkflowStatus.FAILED
    return key, child_key


def rows_of(key: str) -> tuple[int, int]:
    return (
        Step.objects.filter(instance__key=key).count(),
        WorkflowEvent.objects.filter(instance__key=key).count(),
    )


# purge against retry() ---------------------------------------------------------------


def test_purge__while_a_retry_holds_the_instance__neither_waits_nor_deletes_it(
    transactional_db, define
):
    key, child_key = failed_family(define, "held")
    steps, events = rows_of(key)

    report, waited = while_held(
        lambda: workerflow.retry(key, with_children=True),
        lambda: purge.purge(timedelta(0)),
    )

    assert not waited
    assert report.instances == 0
    assert status(key) == status(child_key) == WorkflowStatus.RUNNING
    assert rows_of(key)[0] == steps
    assert rows_of(key)[1] > events


def test_purge__racing_retry__deletes_all_of_an_instance_or_none_of_it(transactional_db, define):
    failing["on"] = True
    outcomes = {"purged": 0, "retried": 0}
    for iteration in range(RACES):
        failing["on"] = True
        key, child_key = failed_family(define, f"purge-retry-{iteration}")
        steps, _ = rows_of(child_key)
        failing["on"] = False
        barrier = threading.Barrier(2)

        def retry(key: str = key, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            jitter()
            try:
                workerflow.retry(key, with_children=True)
            except WorkflowInstance.DoesNotExist:
                return False
            return True

        def purge_all(barrier: threading.Barrier = barrier) -> int:
            barrier.wait()
            jitter()
            return purge.purge(timedelta(0)).instances

        retried, _ = in_threads(retry, purge_all)

        if not retried:
            outcomes["purged"] += 1
            assert not WorkflowInstance.objects.filter(key=key).exists()
            assert not Step.objects.filter(instance__key=key).exists()
            continue
        outcomes["retried"] += 1
        assert status(key) == WorkflowStatus.RUNNING
        # The child was retried with its parent, or purged before the retry reached it.
        if WorkflowInstance.objects.filter(key=child_key).exists():
            assert status(child_key) == WorkflowStatus.RUNNING
            assert rows_of(child_key)[0] == steps
            tick(WorkflowInstance.objects.get(key=child_key).pk)
            assert status(child_key) == WorkflowStatus.COMPLETED
            assert runs[child_key] == 2  # the failed attempt, and one after the retry
            assert Step.objects.get(instance__key=child_key, step_id="work").attempt_count == 2
    print(f"\npurge vs retry: {outcomes}")


# purge against fork() ----------------------------------------------------------------


def test_purge__racing_fork_of_the_instance__never_rolls_back_or_deletes_the_fork(
    transactional_db, define
):
    source = define(wait_for_go, name="fork-source")
    outcomes = {"forked": 0, "purged first": 0}
    for iteration in range(RACES):
        key = f"fork-{iteration}"
        workerflow.start(source, key=key)
        tick(WorkflowInstance.objects.get(key=key).pk)
        workerflow.send_event(key, "go", {})
        tick(WorkflowInstance.objects.get(key=key).pk)
        assert status(key) == WorkflowStatus.COMPLETED
        barrier = threading.Barrier(2)

        def fork(key: str = key, barrier: threading.Barrier = barrier) -> str | None:
            barrier.wait()
            jitter()
            try:
                return workerflow.fork(key, from_step="go").key
            except WorkflowInstance.DoesNotExist:
                return None

        def purge_all(barrier: threading.Barrier = barrier) -> int:
            barrier.wait()
            jitter()
            return purge.purge(timedelta(0)).instances

        forked, _ = in_threads(fork, purge_all)

        if forked is None:
            outcomes["purged first"] += 1
            assert not WorkflowInstance.objects.filter(key=key).exists()
            continue
        outcomes["forked"] += 1
        assert status(forked) == WorkflowStatus.PENDING
        # Purged in the same race or the next purge: the fork stays, unlinked.
        purge.purge(timedelta(0))
        assert not WorkflowInstance.objects.filter(key=key).exists()
        assert WorkflowInstance.objects.get(key=forked).forked_from_id is None
    print(f"\npurge vs fork: {outcomes}")


def test_purge__a_family_whose_child_a_held_fork_points_at__takes_the_parent_only(
    transactional_db, define
):
    """The child stays (a fork of it is held elsewhere), so its link to the parent is cut
    before the parent goes; the batch does not roll back."""
    child = define(wait_for_go, name="held-fork-child")

    def parent(self):
        return self.child("only-child", child, key=f"{self.key}/child")

    workerflow.start(define(parent, name="held-fork-parent"), key="p")
    tick(WorkflowInstance.objects.get(key="p").pk)
    tick(WorkflowInstance.objects.get(key="p/child").pk)
    workerflow.send_event("p/child", "go", {})
    tick(WorkflowInstance.objects.get(key="p/child").pk)
    tick(WorkflowInstance.objects.get(key="p").pk)
    assert status("p") == status("p/child") == WorkflowStatus.COMPLETED
    fork = workerflow.fork("p/child", from_step="go")

    report, waited = while_held(
        lambda: locks.lock_instance(fork.pk), lambda: purge.purge(timedelta(0))
    )

    assert not waited
    assert report.instances == 1
    assert not WorkflowInstance.objects.filter(key="p").exists()
    assert WorkflowInstance.objects.get(key="p/child").parent_id is None
    assert WorkflowInstance.objects.get(pk=fork.pk).forked_from_id is not None
    assert purge.purge(timedelta(0)).instances == 1  # the child, now no one holds its fork
    assert WorkflowInstance.objects.get(pk=fork.pk).forked_from_id is None


# the sweeper against cancel() --------------------------------------------------------


def overdue_family(define, key: str) -> tuple[int, int]:
    """A running parent waiting for its running child, both overdue (a lost bell), the
    child's alarm the earlier: the old sweeper locked the child before the parent."""
    child = define(wait_for_go, name=f"{key}-child")

    def parent(self):
        return self.child("only-child", child, key=f"{self.key}/child")

    workerflow.start(define(parent, name=f"{key}-parent"), key=key)
    parent_pk = WorkflowInstance.objects.get(key=key).pk
    tick(parent_pk)
    child_pk = WorkflowInstance.objects.get(key=f"{key}/child").pk
    tick(child_pk)
    past = now() - sweeping.SWEEP_GRACE - timedelta(minutes=1)
    # A lost bell: the rows as a worker that died would leave them (test set-up).
    WorkflowInstance.objects.filter(pk=parent_pk).update(alarm_at=past, bell_at=None)
    WorkflowInstance.objects.filter(pk=child_pk).update(
        alarm_at=past - timedelta(seconds=1), bell_at=None
    )
    return parent_pk, child_pk


def test_sweep__skips_an_instance_another_transaction_holds(transactional_db, define):
    parent_pk, child_pk = overdue_family(define, "held-sweep")

    rang, waited = while_held(lambda: locks.lock_instance(child_pk), sweeping.sweep)

    assert not waited
    assert rang == 1
    assert WorkflowInstance.objects.get(pk=parent_pk).bell_at is not None
    assert WorkflowInstance.objects.get(pk=child_pk).bell_at is None
    assert sweeping.sweep() == 1  # the next sweep rings the child


def test_sweep__locks_at_most_a_batch_of_rows_per_transaction_in_pk_order(transactional_db, define):
    sleeper = define(wait_for_go, name="many")
    for n in range(250):
        workerflow.start(sleeper, key=f"many-{n}")
    WorkflowInstance.objects.update(alarm_at=now() - timedelta(hours=1), bell_at=None)

    with CaptureQueriesContext(connection) as queries:
        assert sweeping.sweep() == 250

    taking = [q["sql"] for q in queries.captured_queries if "SKIP LOCKED" in q["sql"]]
    assert len(taking) == 3
    sizes = [len(re.search(r'"id" IN \(([^)]*)\)', sql).group(1).split(",")) for sql in taking]
    assert sizes == [100, 100, 50]
    # values_list("pk", "alarm_at"): the first column is the primary key.
    assert all(sql.endswith("ORDER BY 1 ASC FOR UPDATE SKIP LOCKED") for sql in taking)


def test_sweep__racing_cancel_of_a_family__never_deadlocks(transactional_db, define):
    for iteration in range(RACES):
        key = f"sweep-cancel-{iteration}"
        overdue_family(define, key)
        barrier = threading.Barrier(2)
        cancelled: list[bool] = []

        def cancel(
            key: str = key, barrier: threading.Barrier = barrier, cancelled: list[bool] = cancelled
        ) -> None:
            barrier.wait()
            jitter()
            cancelled.append(workerflow.cancel(key, reason="race"))

        thread = threading.Thread(target=lambda: _closing(cancel), daemon=True)
        thread.start()
        barrier.wait()
        jitter()
        sweeping.sweep()  # here: bells ring (in_threads would suppress them)
        thread.join(30)

        assert cancelled == [True]
        assert status(key) == status(f"{key}/child") == WorkflowStatus.CANCELLED


# retry() against cancel() ------------------------------------------------------------


def test_retry__racing_cancel__never_deadlocks_and_runs_each_step_once(transactional_db, define):
    outcomes = {"cancelled after the retry": 0, "retried after a no-op cancel": 0}
    for iteration in range(RACES):
        failing["on"] = True
        key, child_key = failed_family(define, f"retry-cancel-{iteration}")
        failing["on"] = False
        barrier = threading.Barrier(2)

        def retry(key: str = key, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            jitter()
            workerflow.retry(key, with_children=True)

        def cancel(key: str = key, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            jitter()
            return workerflow.cancel(key, reason="race")

        _, cancelled = in_threads(retry, cancel)

        if cancelled:
            outcomes["cancelled after the retry"] += 1
            assert status(key) == status(child_key) == WorkflowStatus.CANCELLED
            assert runs[child_key] == 1
            continue
        outcomes["retried after a no-op cancel"] += 1
        tick(WorkflowInstance.objects.get(key=child_key).pk)
        tick(WorkflowInstance.objects.get(key=key).pk)
        assert status(key) == status(child_key) == WorkflowStatus.COMPLETED
        assert runs[child_key] == 2
        assert Step.objects.get(instance__key=child_key, step_id="work").attempt_count == 2
    print(f"\nretry vs cancel: {outcomes}")
