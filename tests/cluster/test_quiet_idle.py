"""An idle ``qcluster`` writes nothing at its default level, however often it sweeps."""

from __future__ import annotations

import time

import pytest

from django_workerflow.models import WorkerHeartbeat

from .conftest import ClusterRunner, wait_until

pytestmark = pytest.mark.cluster

IDLE_SECONDS = 6.0


@pytest.mark.slow
def test_an_idle_cluster__writes_no_line_per_sweep(qcluster: ClusterRunner) -> None:
    # A sweep every half second: a dozen sweeps in the idle window.
    [cluster] = qcluster.start(WORKERFLOW_SWEEP_SECONDS="0.5")
    wait_until(
        lambda: WorkerHeartbeat.objects.filter(next_beat_at__isnull=False).exists(),
        timeout=30,
        what="the sweeper chain to start",
    )
    time.sleep(1)  # the probe workflow's lines are written
    before = cluster.log().splitlines()
    beat_before = WorkerHeartbeat.objects.get().beat_at

    time.sleep(IDLE_SECONDS)

    new = cluster.log().splitlines()[len(before) :]
    beat_after = WorkerHeartbeat.objects.get().beat_at
    print(
        f"idle cluster: {len(new)} lines in {IDLE_SECONDS:.0f} s "
        f"({len(new) * 60 / IDLE_SECONDS:.0f} per minute), sweeping every 0.5 s"
    )
    assert (beat_after - beat_before).total_seconds() >= IDLE_SECONDS / 2  # it did sweep
    assert new == []
