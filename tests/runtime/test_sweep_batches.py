"""The sweeper rings a backlog larger than one of its transactions (issue 36, item 5): every
instance once, in batches of :data:`~django_workerflow.store.locks.HOUSEKEEPING_BATCH`."""

from __future__ import annotations

from datetime import timedelta

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance
from django_workerflow.runtime import sweeping
from django_workerflow.store import locks
from django_workerflow.values.clock import now


def wait_for_go(self):
    return self.wait("go", "go")


def test_sweep__rings_a_backlog_of_several_batches_each_instance_once(db, define):
    sleeper = define(wait_for_go, name="backlog")
    count = 2 * locks.HOUSEKEEPING_BATCH + 7
    for n in range(count):
        workerflow.start(sleeper, key=f"backlog-{n}")
    overdue = now() - sweeping.SWEEP_GRACE - timedelta(minutes=1)
    # Lost bells, as a worker that died would leave them (test set-up).
    WorkflowInstance.objects.update(alarm_at=overdue, bell_at=None)

    assert sweeping.sweep() == count

    assert not WorkflowInstance.objects.filter(bell_at__isnull=True).exists()
    assert sweeping.sweep() == 0
