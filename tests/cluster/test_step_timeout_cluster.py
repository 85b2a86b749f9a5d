"""Step timeouts on a real cluster: a django-q2 worker runs its task in the main thread of
its process, so a run step's timer interrupts a callback that sleeps or loops in Python
(recorded as StepTimeoutError, then retried); a callback inside one C call cannot be
interrupted, so django-q2's process timeout kills its worker, and the attempt is counted as
interrupted (WorkerLostError after three). The figures printed say how long after the
attempt's start its failure was recorded, against the timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from django_workerflow import StepTimeoutError, WorkerLostError, start
from django_workerflow.engine.failures import INTERRUPTED_ERROR_NAME
from django_workerflow.models import WorkflowInstance, WorkflowStatus
from tests.reliability.conftest import print_figures

from .conftest import ClusterRunner, wait_until
from .test_worker_recovery import wait_for_heartbeat

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TIMEOUT = 1.0
#: How long an attempt would overrun if nothing stopped it.
HOLD = 30
#: A short lease and sweep (a killed attempt is found soon) and a short process timeout.
C_CALL_CLUSTER = {
    "WORKERFLOW_LEASE_SECONDS": "3",
    "WORKERFLOW_SWEEP_SECONDS": "1",
    "WORKERFLOW_TEST_Q_TIMEOUT": "3",
}


def attempt_starts(trace: Path) -> list[float]:
    return [float(line.split()[0]) for line in trace.read_text().splitlines()]


def finished(instance: WorkflowInstance) -> WorkflowInstance | None:
    row = WorkflowInstance.objects.get(pk=instance.pk)
    return row if row.status in (WorkflowStatus.COMPLETED, WorkflowStatus.FAILED) else None


def failures(instance: WorkflowInstance) -> list:
    return list(instance.step_events.filter(type="attempt_failed").order_by("attempt_number"))


@pytest.mark.parametrize("how", ["sleep", "loop"])
def test_python_callback__is_interrupted_at_its_timeout_and_retried(
    qcluster: ClusterRunner, tmp_path, how
):
    qcluster.start()
    trace = tmp_path / "trace"
    instance = start(
        "cluster-timed-step",
        key=f"timed-{how}",
        input={"trace": str(trace), "how": how, "timeout": TIMEOUT, "hold": HOLD},
    )
    row = wait_until(lambda: finished(instance), timeout=HOLD, what="the instance to finish")

    assert row.status == WorkflowStatus.COMPLETED
    [failed] = failures(instance)
    assert failed.error_name == StepTimeoutError.__name__
    started = attempt_starts(trace)
    assert len(started) == 2
    to_failure = failed.recorded_at.timestamp() - started[0]
    print_figures(
        f"step timeout, {how} callback on a qcluster",
        timeout_s=TIMEOUT,
        attempt_start_to_recorded_failure_s=f"{to_failure:.3f}",
        over_the_timeout_s=f"{to_failure - TIMEOUT:.3f}",
    )
    # Interrupted, not found late: far sooner than the callback would have ended.
    assert TIMEOUT <= to_failure < HOLD / 2


def test_c_call__ends_with_the_process_timeout_and_counts_as_interrupted(
    qcluster: ClusterRunner, tmp_path
):
    qcluster.start(**C_CALL_CLUSTER)
    wait_for_heartbeat()
    trace = tmp_path / "trace"
    instance = start(
        "cluster-timed-step",
        key="timed-c-call",
        input={"trace": str(trace), "how": "c-call", "timeout": TIMEOUT, "hold": HOLD},
    )
    row = wait_until(lambda: finished(instance), timeout=180, what="the instance to finish")

    assert row.status == WorkflowStatus.FAILED
    assert row.error_name == WorkerLostError.__name__
    recorded = failures(instance)
    assert [event.error_name for event in recorded] == [
        INTERRUPTED_ERROR_NAME,
        INTERRUPTED_ERROR_NAME,
        WorkerLostError.__name__,
    ]
    started = attempt_starts(trace)
    pids = [line.split()[1] for line in trace.read_text().splitlines()]
    assert len(started) == 3
    assert len(set(pids)) == 3  # each attempt's worker was killed
    assert "reincarnated worker" in qcluster.log()
    gaps = [
        f"{event.recorded_at.timestamp() - began:.1f}"
        for event, began in zip(recorded, started, strict=True)
    ]
    print_figures(
        "step timeout, C call on a qcluster (process timeout 3 s)",
        timeout_s=TIMEOUT,
        attempt_start_to_recorded_interruption_s="/".join(gaps),
    )
