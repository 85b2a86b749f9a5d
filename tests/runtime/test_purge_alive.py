"""Purge deletes only what is finished, and what is finished even when something that
lives on points at it (issue 36, item 3): a fork, a detached child, a step awaiting it."""

from __future__ import annotations

from datetime import timedelta

import pytest

import django_workerflow as workerflow
from django_workerflow.models import Step, WorkflowEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime import purge
from tests.support.instances import get, status_of


def waits_for_go(self):
    self.run("reserve", lambda: {"sku": "A-1"})
    return self.wait("go", "go")


@pytest.fixture
def orders_waiting_for_go(define):
    return define(waits_for_go, name="orders", version="v1")


def test_purge__deletes_a_finished_instance_whose_fork_lives_on(
    orders_waiting_for_go, workerflow_harness
):
    harness = workerflow_harness
    workerflow.start(orders_waiting_for_go, key="source")
    workerflow.start(orders_waiting_for_go, key="other")
    harness.drain()
    workerflow.send_event("source", "go", {})
    workerflow.send_event("other", "go", {})
    harness.drain()
    fork = workerflow.fork("source", from_step="go")
    harness.drain()
    assert status_of("source") == status_of("other") == WorkflowStatus.COMPLETED
    assert status_of(fork.key) == WorkflowStatus.RUNNING
    harness.clock.advance(timedelta(days=2))

    report = purge.purge(timedelta(days=1))

    assert report.instances == 2
    assert set(WorkflowInstance.objects.values_list("key", flat=True)) == {fork.key}
    alive = get(fork.key)
    assert alive.forked_from_id is None
    assert alive.status == WorkflowStatus.RUNNING
    assert Step.objects.filter(instance=alive).count() == 2  # the copied run, the wait
    assert WorkflowEvent.objects.filter(instance=alive, type="forked").exists()
    workerflow.send_event(fork.key, "go", {})
    harness.drain()
    assert status_of(fork.key) == WorkflowStatus.COMPLETED


def test_purge__keeps_an_instance_a_retry_set_running_after_the_batch_was_read(
    define, workerflow_harness
):
    """The batch is read, then a retry runs the instance again: the delete re-checks."""
    harness = workerflow_harness

    def fails(self):
        return self.run("boom", lambda: 1 / 0, max_attempts=1)

    failing = define(fails, name="fails", version="v1")
    workerflow.start(failing, key="f-1")
    harness.drain()
    assert status_of("f-1") == WorkflowStatus.FAILED
    harness.clock.advance(timedelta(days=2))
    queryset = purge.purgeable(timedelta(days=1))
    batch = list(queryset.values_list("pk", flat=True))
    workerflow.retry("f-1")

    counts = purge.delete_batch(batch, queryset)

    assert counts.get("instances", 0) == 0
    assert status_of("f-1") == WorkflowStatus.RUNNING
    assert Step.objects.filter(instance__key="f-1").exists()
