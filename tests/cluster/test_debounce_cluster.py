"""Debounce under a real ``manage.py qcluster``: a burst of starts of one key inside the
debounce window starts one instance, which runs once, with the last input (figures printed)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import django_workerflow as workerflow
from django_workerflow.models import WorkflowEvent, WorkflowInstance, WorkflowStatus

from .conftest import ClusterRunner, wait_until

pytestmark = pytest.mark.cluster


@pytest.mark.slow
def test_burst_of_ten_starts__one_instance_runs_once_with_the_last_input(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    qcluster.start()
    first = time.time()
    instances = []
    for n in range(10):
        instances.append(
            workerflow.start(
                "cluster-debounced", key="record-1", input={"dir": str(tmp_path), "n": n}
            )
        )
        last = time.time()
        time.sleep(0.05)
    wait_until(
        lambda: WorkflowInstance.objects.filter(
            key="record-1", status=WorkflowStatus.COMPLETED
        ).exists(),
        timeout=30,
        what="the debounced instance to complete",
    )
    time.sleep(1.5)  # a second run, if any, would have come by now
    runs = (tmp_path / "record-1.runs").read_text().splitlines()
    instance = WorkflowInstance.objects.get(key="record-1")
    assert {i.pk for i in instances} == {instance.pk}
    assert WorkflowInstance.objects.filter(definition_name="cluster-debounced").count() == 1
    assert len(runs) == 1
    pid, n, ran_at = runs[0].split()
    assert n == "9"
    assert instance.result == 9
    debounced = WorkflowEvent.objects.filter(instance=instance, type="debounced").count()
    assert debounced == 9
    ran_after_last = float(ran_at) - last
    # The first tick waits the debounce (1 s) from the last start, not from the first.
    assert ran_after_last >= 0.95
    print(
        f"debounce under qcluster: 10 starts in {last - first:.3f} s -> 1 instance, "
        f"{len(runs)} run with n={n} (pid {pid}), {debounced} input replacements; "
        f"ran {float(ran_at) - first:.3f} s after the first start, "
        f"{ran_after_last:.3f} s after the last (debounce 1 s)"
    )
