"""A tick that finds a live lease moves the instance's alarm to that lease's expiry, so an
instance rung while a dead worker's lease runs out is not ticked again and again."""

from __future__ import annotations

import pytest

import django_workerflow as workerflow
from django_workerflow.conf import settings
from django_workerflow.models import WorkflowStatus
from django_workerflow.runtime.tick import tick
from tests.support.failures import WorkerDiedError

pytestmark = pytest.mark.django_db


@pytest.fixture
def dead_worker_instance(define, workerflow_harness):
    """An instance whose worker died inside a step, leaving its lease live."""
    deaths = [1]

    def step():
        if deaths:
            deaths.pop()
            raise WorkerDiedError()
        return "done"

    instance = workerflow.start(define(lambda self: self.run("work", step)))
    with pytest.raises(WorkerDiedError):
        workerflow_harness.drain()
    instance.refresh_from_db()
    assert instance.lease_expires_at > workerflow_harness.now()
    return instance


def test_tick__finding_a_live_lease_moves_the_alarm_to_its_expiry(dead_worker_instance):
    instance = dead_worker_instance
    workerflow.pause(instance)
    workerflow.resume(instance)  # rings the instance at once

    result = tick(instance.pk)

    instance.refresh_from_db()
    assert result.outcome == "busy"
    assert instance.alarm_at == instance.lease_expires_at == result.alarm_at


def test_drain__after_resume_waits_for_the_dead_lease_instead_of_spinning(
    dead_worker_instance, workerflow_harness
):
    instance = dead_worker_instance
    workerflow_harness.max_ticks = 20
    workerflow.pause(instance)
    workerflow.resume(instance)

    assert workerflow_harness.drain() == 1  # one busy tick, then nothing is due
    workerflow_harness.advance(settings.LEASE_SECONDS + 1)
    workerflow_harness.advance(1)  # the retry of the interrupted attempt

    instance.refresh_from_db()
    assert (instance.status, instance.result) == (WorkflowStatus.COMPLETED, "done")
