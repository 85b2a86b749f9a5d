"""A poison step: its callback kills the worker process that runs it, every time.

Each crash leaves the step 'running' under a lease nobody renews; when the lease runs out,
the next tick records the attempt as interrupted and retries it after its backoff. After
``max_attempts`` crashes the step fails, and with it the workflow: the poison never loops,
and the cluster (whose guard replaced each dead worker) keeps working.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from django_workerflow import start
from django_workerflow.engine.execution import INTERRUPTED_ERROR_NAME, INTERRUPTED_MESSAGE
from django_workerflow.exceptions import MaxAttemptsExceededError
from django_workerflow.models import (
    Step,
    StepEvent,
    StepEventType,
    StepState,
    WorkflowInstance,
    WorkflowStatus,
    step_events_of,
)
from django_workerflow.runtime import verbs
from tests.reliability.conftest import print_figures

from .conftest import LEASE_SECONDS, ClusterRunner, Trace, drive, respawned_workers

pytestmark = [pytest.mark.reliability, pytest.mark.cluster, pytest.mark.slow]

MAX_ATTEMPTS = 3


def test_poison_step__fails_after_max_attempts_with_every_crash_recorded_and_never_loops(
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
    assert failed.error_name == MaxAttemptsExceededError.__name__
    assert failed.error_message == (
        "MaxAttemptsExceededError: Run step 'poison' exhausted its configured attempts."
    )
    assert failed.lease_token is None
    assert failed.alarm_at is None
    assert dict(Step.objects.filter(instance=failed).values_list("step_id", "state")) == {
        "before": StepState.SUCCEEDED,
        "poison": StepState.FAILED,
    }
    assert poison_history(failed.pk) == [
        (event_type, attempt, error)
        for attempt in range(1, MAX_ATTEMPTS + 1)
        for event_type, error in (
            (StepEventType.ATTEMPT_STARTED, ""),
            (StepEventType.ATTEMPT_FAILED, INTERRUPTED_MESSAGE),
        )
    ]
    interrupted = StepEvent.objects.filter(
        step__instance=failed, step__step_id="poison", type=StepEventType.ATTEMPT_FAILED
    )
    assert set(interrupted.values_list("error_name", flat=True)) == {INTERRUPTED_ERROR_NAME}
    assert trace.executions() == {("poison", "before"): 1, ("poison", "poison"): MAX_ATTEMPTS}
    crashed = [callback.pid for callback in trace.callbacks if callback.step_id == "poison"]
    assert len(set(crashed)) == MAX_ATTEMPTS  # each attempt ran in a fresh worker
    assert respawned_workers(cluster) == MAX_ATTEMPTS

    # It never loops: past another lease and a sweep, nothing runs or changes.
    time.sleep(float(LEASE_SECONDS) + 1)
    assert verbs.sweep() == 0
    time.sleep(1)
    assert trace.executions()[("poison", "poison")] == MAX_ATTEMPTS
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
