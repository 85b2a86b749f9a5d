"""A real qcluster starts a per-second schedule on time (issue 14): each occurrence's
instance is created within a fraction of a second of its scheduled time, by the schedule's
precise bell rather than django-q2's 30-second scheduler."""

from __future__ import annotations

import itertools
import statistics
from datetime import datetime

import pytest

from django_workerflow.models import WorkflowInstance, WorkflowStatus
from django_workerflow.runtime.flow import schedules

from .conftest import ClusterRunner, wait_until

OCCURRENCES = 10


@pytest.mark.slow
def test_a_per_second_schedule__starts_each_occurrence_on_time(
    qcluster: ClusterRunner, define_with
) -> None:
    # The same declaration as the clusters' (the env variable gives it to them).
    define_with(lambda self: self.input["scheduled_at"], name="cluster-every-second",
                version="1", schedule="* * * * * *")  # fmt: skip
    qcluster.start(WORKERFLOW_TEST_EVERY_SECOND="1")
    schedules.sync()  # creates the row and queues the first bell, as migrate would
    scheduled = WorkflowInstance.objects.filter(definition_name="cluster-every-second")
    wait_until(
        lambda: scheduled.filter(status=WorkflowStatus.COMPLETED).count() >= OCCURRENCES + 1,
        timeout=30,
        what=f"{OCCURRENCES} per-second occurrences",
    )
    rows = list(scheduled.order_by("created_at").values_list("key", "input", "created_at"))
    # The first occurrence may have been due before its bell was queued: leave it out.
    lateness = []
    for key, input, created_at in rows[1 : OCCURRENCES + 1]:
        occurrence = datetime.fromisoformat(input["scheduled_at"])
        assert key == f"cluster-every-second@{input['scheduled_at']}"
        lateness.append((created_at - occurrence).total_seconds())
    occurrences = [datetime.fromisoformat(row[1]["scheduled_at"]) for row in rows]
    skipped = sum(int((b - a).total_seconds()) - 1 for a, b in itertools.pairwise(occurrences))
    print(
        f"schedule lateness over {len(lateness)} occurrences: median "
        f"{statistics.median(lateness) * 1000:.0f} ms, max {max(lateness) * 1000:.0f} ms; "
        f"seconds skipped {skipped}"
    )
    assert min(lateness) >= 0, "an occurrence started before its time"
    assert statistics.median(lateness) <= 0.5
    assert max(lateness) <= 1.5
    assert len({row[0] for row in rows}) == len(rows)
