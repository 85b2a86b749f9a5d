"""Thread races on PostgreSQL: many workers freeing and taking slots, concurrent starts and
cancels, never exceed a concurrency limit (the maximum observed in a trace)."""

from __future__ import annotations

import random
import threading
import time

import pytest
from django.db import connection
from django.db.models import Count

import django_workerflow as workerflow
from django_workerflow.models import WorkflowEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime.tick import tick
from django_workerflow.values.clock import now as clock_now
from tests.support.threads import in_threads

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (WORKERFLOW_DB=postgres): SQLite serialises all writers",
    ),
]
rng = random.Random(20261201)


class Trace:
    """Who is inside the limited step right now, and the most at once, per key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.entries = 0
        self.side_by_side: dict[str, threading.Event] = {}

    def enter(self, key: str) -> bool:
        """Count an entry; return whether it is the key's first."""
        with self.lock:
            self.inside[key] = self.inside.get(key, 0) + 1
            first = key not in self.peak
            self.peak[key] = max(self.peak.get(key, 0), self.inside[key])
            self.entries += 1
            company = self.side_by_side.setdefault(key, threading.Event())
            if self.inside[key] >= 2:
                company.set()
            return first

    def wait_for_company(self, key: str, timeout: float) -> None:
        """Hold the key's first entrant until a second one is inside beside it."""
        self.side_by_side[key].wait(timeout)

    def leave(self, key: str) -> None:
        with self.lock:
            self.inside[key] -= 1


def work_until_done(total: int, deadline: float) -> int:
    """A worker: tick due instances until every instance has finished; return its ticks."""
    ticks = 0
    while time.monotonic() < deadline:
        finished = WorkflowInstance.objects.finished().count()
        if finished >= total:
            return ticks
        due = list(WorkflowInstance.objects.due(clock_now()).values_list("pk", flat=True)[:8])
        rng.shuffle(due)
        for pk in due:
            tick(pk)
            ticks += 1
        if not due:
            time.sleep(0.002)
    raise AssertionError("the instances did not all finish in time")


@pytest.mark.parametrize(("limit", "keys"), [(3, 1), (2, 3)])
def test_racing_workers_starts_and_cancels__never_exceed_the_limit(
    transactional_db, define_with, limit, keys
):
    trace = Trace()

    def execute(self):
        group = self.input["group"]

        def hold():
            if trace.enter(group):
                # Two instances side by side must not depend on how six threads happen to
                # be scheduled: the first in waits for a second (the limit admits one).
                trace.wait_for_company(group, timeout=10)
            time.sleep(rng.uniform(0.005, 0.02))
            trace.leave(group)
            return group

        return self.run("hold", hold)

    definition = define_with(
        execute, max_concurrency=limit, concurrency_key=lambda self: self.input["group"]
    )
    starters, per_starter, workers = 4, 15, 6
    total = starters * per_starter
    started = threading.Barrier(starters + workers + 1)

    def starter(number: int) -> None:
        started.wait()
        for index in range(per_starter):
            workerflow.start(
                definition,
                key=f"s{number}-{index}",
                input={"group": f"g{index % keys}"},
                priority=rng.randint(-2, 2),
            )

    def canceller() -> int:
        started.wait()
        cancelled = 0
        for _ in range(10):
            time.sleep(0.02)
            # Pending only: a cancelled running instance frees its slot at once while its
            # step may still be in flight, which the trace would count as over the limit.
            pending = WorkflowInstance.objects.filter(status=WorkflowStatus.PENDING)
            pks = list(pending.values_list("pk", flat=True)[:20])
            if pks:
                cancelled += workerflow.cancel(
                    WorkflowInstance.objects.get(pk=rng.choice(pks)), "race"
                )
        return cancelled

    deadline = time.monotonic() + 90
    results = in_threads(
        *[lambda n=n: starter(n) for n in range(starters)],
        *[lambda: (started.wait(), work_until_done(total, deadline))[1] for _ in range(workers)],
        canceller,
        timeout=120,
    )

    assert WorkflowInstance.objects.count() == total
    assert WorkflowInstance.objects.finished().count() == total
    assert max(trace.peak.values()) <= limit
    # The race really ran instances side by side: each key's first entrant waited for a
    # second (reaching the limit itself depends on the scheduling of six threads).
    assert min(trace.peak.values()) >= 2
    # No double admission: every instance started at most once.
    started_twice = (
        WorkflowEvent.objects.filter(type="started")
        .values("instance_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    assert not started_twice.exists()
    completed = WorkflowInstance.objects.filter(status=WorkflowStatus.COMPLETED).count()
    assert completed + results[-1] == total
    assert trace.entries >= completed
