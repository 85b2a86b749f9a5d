"""Issue 43 item 1 with a real cluster: workers named 'workers', and this process (the web
process) named 'workerflow' as the test settings say. Its bells wait in a queue no cluster
serves; the sweeper rings those instances late from the workers' queue, and `health` fails
naming the stranded queue and the fix."""

from __future__ import annotations

import time
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_workerflow import start
from django_workerflow.models import WorkflowInstance, WorkflowStatus

from .conftest import ClusterRunner, wait_until

pytestmark = pytest.mark.cluster


@pytest.mark.slow
def test_web_and_workers_named_apart__health_names_the_stranded_queue(
    qcluster: ClusterRunner,
) -> None:
    # The probe of start() completes too, only late: the sweeper rings it from 'workers'.
    qcluster.start(WORKERFLOW_Q_NAME="workers", WORKERFLOW_SWEEP_SECONDS="2")
    began = time.monotonic()
    instance = start("cluster-probe", key=f"stranded-{uuid.uuid4()}")
    wait_until(
        lambda: WorkflowInstance.objects.filter(
            pk=instance.pk, status=WorkflowStatus.COMPLETED
        ).exists(),
        timeout=30,
        what="the sweeper to ring the stranded instance",
    )
    print(f"a one-step workflow started from another queue took {time.monotonic() - began:.1f} s")
    start("cluster-probe", key=f"waiting-{uuid.uuid4()}")  # leaves a bell in 'workerflow'

    with pytest.raises(CommandError) as failed:
        call_command("workerflow", "health", stdout=StringIO())

    assert "wait in queue 'workerflow', which no cluster serves" in str(failed.value)
    assert "(the clusters serve 'workers')" in str(failed.value)
    assert "the same Q_CLUSTER['name']" in str(failed.value)
