"""Tasks sent to a worker started before ``TASKS`` named the backend, on real clusters: the
worker logs to restart it with ``TASKS``, and once restarted the tasks run at once, before
the minute's re-check the old worker deferred them to."""

from __future__ import annotations

import pytest

from django_workerflow.models import WorkflowInstance
from django_workerflow.values.states import WakeCause
from tests.clusterapp import tasks
from tests.reliability.conftest import print_figures

from .conftest import ClusterRunner, wait_until

try:  # Django 6
    from django.tasks import TaskResultStatus
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

HINT = "Restart the workers with the settings that configure TASKS"


def test_tasks_before_tasks_configured__run_at_once_when_the_worker_restarts(
    qcluster: ClusterRunner,
):
    (old,) = qcluster.start(WORKERFLOW_TEST_NO_TASKS="1")
    result = tasks.add.enqueue(2, 3)
    wait_until(lambda: HINT in old.log(), timeout=30, what="the old worker's hint")
    # The tick logs the hint before its transaction commits the deferral: wait for the row.
    deferred = wait_until(
        lambda: WorkflowInstance.objects.filter(
            key=result.id, alarm_cause=WakeCause.UNREGISTERED
        ).first(),
        timeout=30,
        what="the old worker's deferral",
    )
    assert "define it there and deploy" not in old.log()
    old.stop()

    qcluster.start()  # with TASKS: the restart
    wait_until(lambda: result.refresh() or result.is_finished, timeout=60, what="the task")

    print_figures(
        "task deferred by a worker without TASKS, after the restart",
        started_before_recheck_s=f"{(deferred.alarm_at - result.started_at).total_seconds():.1f}",
    )
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.started_at < deferred.alarm_at  # not at the minute's re-check
