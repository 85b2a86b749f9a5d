"""Progress reported by a workflow a real ``manage.py qcluster`` runs, read by a waiter in
this process as a view would: every value, in order, none lost (latency printed)."""

from __future__ import annotations

import time

import pytest

import django_workerflow as workerflow
from django_workerflow.values.clock import now as clock_now

from .conftest import ClusterRunner

pytestmark = pytest.mark.cluster


@pytest.mark.slow
def test_wait_progress__sees_every_value_a_cluster_reports_in_order(
    qcluster: ClusterRunner,
) -> None:
    qcluster.start()
    instance = workerflow.start("cluster-progress", key="import", input={"pause": 0.3})
    seen = []
    latencies = []
    last = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            last = workerflow.wait_progress(instance, after=last, timeout=10)
        except TimeoutError:
            break  # the instance finished: no newer value can come
        # The value is stamped when set_progress() is called, just before its commit.
        latencies.append((clock_now() - last.updated_at).total_seconds() * 1000)
        seen.append((last.current, last.message))
    assert seen == [(n, f"batch {n + 1}") for n in range(10)] + [(10, "done")]
    assert workerflow.wait_result(instance, timeout=10) == 10
    latencies.sort()
    print(
        f"wait_progress under qcluster: {len(seen)} values in order, latency from "
        f"set_progress() median {latencies[len(latencies) // 2]:.1f} ms, "
        f"max {latencies[-1]:.1f} ms"
    )
