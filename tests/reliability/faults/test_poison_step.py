"""A poison step: its callback kills the worker process that runs it, every time.

Each crash leaves the step 'running' under a lease nobody renews; when the lease runs out,
the next tick records the attempt as interrupted and retries it after its backoff. After
``WORKERFLOW_MAX_INTERRUPTED_ATTEMPTS`` (3) crashes in a row the step fails with
``WorkerLostError``, however many attempts it had left, and with it the workflow: the poison
never loops, and the cluster (whose guard replaced each dead worker) keeps working.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from django_workerflow import start
from django_workerflow.engine.execution import INTERRUPTED_ERROR_NAME, INTERRUPTED_MESSAGE
from django_workerflow.engine.failures import worker_lost_message
from django_workerflow.exceptions import WorkerLostError
from django_workerflow.models import (
    Step,
    StepEvent,
    StepEventType,
    StepState,
    WorkflowInstance,
    WorkflowStatus,
    step_events_of,
)
from django_workerflow.runtime import sweeping
from tests.reliability.conftest import print_figures

from .conftest import LEASE_SECONDS, ClusterRunner, Trace, drive, respawned_workers

pytestmark = [pytest.mark.reliability, pytest.mark.cluster, pytest.mark.slow]

# Attempts to spare: the poison is stopped by its interruptions in a row, not by its budget.
MAX_ATTEMPTS = 10
CRASHES = 3  # the default WORKERFLOW_MAX_INTERRUPTED_ATTEMPTS


def test_poison_step__fails_with_worker_lost_after_three_crashes_all_recorded_and_never_loops(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    (cluster,) = qcluster.start(WORKERFLOW_LEASE_SECONDS=LEASE_SECONDS)
    trace = Trace(tmp_path / "trace")
    began = time.monotonic()
    instance = start(
        "fault-poison",
        key="poison",
        input={"trace": str(trace.path), "max_attempts": MAX_ATTEMPTS},
    )

    # Three crashes, each recovered a lease (3 s) later: bounded well below the timeout.
    drive([instance.pk], timeout=45)

    seconds = time.monotonic() - began
    failed = WorkflowInstance.objects.get(pk=instance.pk)
    assert failed.status == WorkflowStatus.FAILED
    lost = worker_lost_message("Run step 'poison'", CRASHES)
    assert failed.error_name == WorkerLostError.__name__
    assert failed.error_message == f"WorkerLostError: {lost}"
    assert failed.lease_token is None
    assert failed.alarm_at is None
    assert dict(Step.objects.filter(instance=failed).values_list("step_id", "state")) == {
        "before": StepState.SUCCEEDED,
        "poison": StepState.FAILED,
    }
    assert poison_history(failed.pk) == [
        (event_type, attempt, error)
        for attempt in range(1, CRASHES + 1)
        for event_type, error in (
            (StepEventType.ATTEMPT_STARTED, ""),
            (StepEventType.ATTEMPT_FAILED, lost if attempt == CRASHES else INTERRUPTED_MESSAGE),
        )
    ]
    interrupted = StepEvent.objects.filter(
        step__instance=failed, step__step_id="poison", type=StepEventType.ATTEMPT_FAILED
    ).order_by("attempt_number")
    assert list(interrupted.values_list("error_name", flat=True)) == [
        *[INTERRUPTED_ERROR_NAME] * (CRASHES - 1),
        WorkerLostError.__name__,
    ]
    assert trace.executions() == {("poison", "before"): 1, ("poison", "poison"): CRASHES}
    crashed = [callback.pid for callback in trace.callbacks if callback.step_id == "poison"]
    assert len(set(crashed)) == CRASHES  # each attempt ran in a fresh worker
    assert respawned_workers(cluster) == CRASHES

    # It never loops: past another lease and a sweep, nothing runs or changes.
    time.sleep(float(LEASE_SECONDS) + 1)
    assert sweeping.sweep() == 0
    time.sleep(1)
    assert trace.executions()[("poison", "poison")] == CRASHES
    assert WorkflowInstance.objects.get(pk=failed.pk).updated_at == failed.updated_at
    # The cluster still works.
    qcluster.probe()
    print_figures(
        "poison step",
        crashes=len(crashed),
        interrupted_attempts_recorded=interrupted.count(),
        workers_respawned=respawned_workers(cluster),
        seconds_to_failure=round(seconds, 1),
    )


def poison_history(instance_pk: int) -> list[tuple[str, int | None, str]]:
    """The poison step's events, stored and derived (its first start is read from its row)."""
    step = Step.objects.get(instance_id=instance_pk, step_id="poison")
    return [
        (event.type, event.attempt_number, event.error_message)
        for event in step_events_of(instance_pk, [step])
    ]
