"""Instance timeouts on a real qcluster: an instance sleeping an hour with a 2 s timeout is
woken by the bell of its deadline and fails with WorkflowTimeoutError; one whose step sleeps
an hour in Python is interrupted by the step's timer, bounded by the time left. The figures
printed (run with ``-s``) say how long after the deadline the failure was recorded."""

from __future__ import annotations

import pytest

from django_workerflow import WorkflowTimeoutError, start
from django_workerflow.models import WorkflowInstance, WorkflowStatus
from tests.reliability.conftest import print_figures

from .conftest import ClusterRunner, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TIMEOUT = 2.0
#: Generous: a bell's delay and a tick, far below the hour the instance would otherwise take.
BOUND = 60


def failed(instance: WorkflowInstance) -> WorkflowInstance | None:
    row = WorkflowInstance.objects.get(pk=instance.pk)
    return row if row.is_terminal else None


@pytest.mark.parametrize("how", ["sleep", "step"])
def test_instance_timeout__fails_an_instance_that_would_run_an_hour(qcluster: ClusterRunner, how):
    qcluster.start()
    instance = start("cluster-overdue", key=f"overdue-{how}", input={"how": how}, timeout=TIMEOUT)
    row = wait_until(lambda: failed(instance), timeout=BOUND, what="the instance to time out")

    assert row.status == WorkflowStatus.FAILED
    assert row.error_name == WorkflowTimeoutError.__name__
    assert f"Instance 'overdue-{how}' did not finish within 2 s" in row.error_message
    assert row.deadline_at is not None
    assert row.finished_at is not None
    started_at = row.workflow_events.get(type="started").recorded_at
    print_figures(
        f"instance timeout on a qcluster, {how}",
        timeout_s=TIMEOUT,
        first_tick_to_failure_s=f"{(row.finished_at - started_at).total_seconds():.3f}",
        after_the_deadline_s=f"{(row.finished_at - row.deadline_at).total_seconds():.3f}",
    )
    assert row.finished_at >= row.deadline_at
    if how == "step":
        attempt = row.step_events.get(step__step_id="hang", type="attempt_failed")
        assert attempt.error_name == WorkflowTimeoutError.__name__
