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
from django_workerflow.runtime import verbs
from django_workerflow.values.clock import now as clock_now
from tests.threads import in_threads

from . import flow_helpers

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (WORKERFLOW_DB=postgres): SQLite serialises all writers",
    ),
]
define_with = flow_helpers.define_with
rng = random.Random(20261201)


class Trace:
    """Who is inside the limited step right now, and the most at once, per key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.entries = 0

    def enter(self, key: str) -> None:
        with self.lock:
            self.inside[key] = self.inside.get(key, 0) + 1
            self.peak[key] = max(self.peak.get(key, 0), self.inside[key])
            self.entries += 1

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
            verbs.tick(pk)
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
            trace.enter(group)
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
    # The race really ran instances side by side (reaching the limit itself depends on
    # the scheduling of six threads on a small machine).
    assert max(trace.peak.values()) >= 2
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
