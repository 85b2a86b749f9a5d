"""on_finish is delivered at least once: a worker SIGKILLed mid-hook is redelivered to a
live one after the delivery's lease (real ``qcluster``)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from django_q.models import Schedule

from django_workerflow import start
from django_workerflow.models import FinishDelivery
from django_workerflow.runtime.composition import deliveries
from django_workerflow.values.clock import now
from django_workerflow.workers.sweeper_schedule import SWEEPER_NAME

from .conftest import ClusterRunner, wait_until


@pytest.mark.slow
def test_sigkill_mid_hook__is_redelivered_after_the_lease(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    Schedule.objects.filter(name=SWEEPER_NAME).delete()  # the test rings the sweep itself
    qcluster.start(WORKERFLOW_LEASE_SECONDS="3")
    instance = start("cluster-hooked", key="hooked", input={"dir": str(tmp_path)})
    trace = tmp_path / "hooked.hook"
    first = wait_until(
        lambda: trace.exists() and trace.read_text().partition("\n")[0],
        timeout=15,
        what="the first call of on_finish",
    )
    killed, outcome_id = (int(field) for field in first.split())
    os.kill(killed, signal.SIGKILL)

    delivery = FinishDelivery.objects.get(instance=instance)
    assert (delivery.attempt_count, delivery.acknowledged_at) == (1, None)
    assert delivery.pk == outcome_id
    time.sleep(max((delivery.leased_until - now()).total_seconds(), 0) + 0.3)
    assert deliveries.ring_due() == 1

    wait_until(
        lambda: FinishDelivery.objects.filter(
            pk=delivery.pk, acknowledged_at__isnull=False
        ).exists(),
        timeout=20,
        what="the redelivery to be acknowledged",
    )
    calls = [line.split() for line in trace.read_text().splitlines()]
    assert len(calls) == 2
    assert int(calls[1][0]) != killed
    assert {int(call[1]) for call in calls} == {delivery.pk}
    delivery.refresh_from_db()
    assert delivery.attempt_count == 2
    assert [attempt.get("error") for attempt in delivery.attempts] == [None, None]
    assert delivery.attempts[0].get("finished_at") is None  # the killed attempt never ended
