"""A worker stopped while a step is in flight: the step is recorded or retried, never half.

SIGTERM to a qcluster's main process is django-q2's graceful stop: the pusher stops taking
tasks, and each worker finishes the task in hand before it exits. A tick that is asked to
stop mid-step therefore records the step in flight, then yields at its next step boundary
(the clusters here run with a short tick budget) and leaves the rest to the next cluster.
SIGTERM to a worker process itself kills it at once: its step is recorded as interrupted
when its lease runs out, and retried.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from django.db import transaction

from django_workerflow import start
from django_workerflow.engine.execution import INTERRUPTED_ERROR_NAME
from django_workerflow.models import Step, StepEventType, StepState, step_events_of
from tests.reliability.conftest import print_figures

from .conftest import (
    LEASE_SECONDS,
    Callback,
    ClusterRunner,
    Trace,
    assert_no_step_running,
    attempt_histories,
    check_attempts,
    check_steps_recorded_once,
    drive,
    finished_statuses,
    respawned_workers,
    wait_until,
    worker_pids,
)

pytestmark = [pytest.mark.reliability, pytest.mark.cluster, pytest.mark.slow]

INSTANCES = 6
STEPS = 4
STEP_SECONDS = (0.8, 1.2)
# A tick yields at the first step boundary after this many seconds: a stopping worker ends
# its task soon after the step in flight.
TICK_BUDGET = "0.5"
STOP_TIMEOUT = 20


def start_instances(trace: Trace, prefix: str, count: int) -> list[int]:
    with transaction.atomic():
        return [
            start(
                "fault-steps",
                key=f"{prefix}-{index}",
                input={"trace": str(trace.path), "steps": STEPS, "seconds": STEP_SECONDS},
            ).pk
            for index in range(count)
        ]


def in_flight(trace: Trace, pids: set[int], count: int) -> list[Callback]:
    """Wait until ``count`` of ``pids`` execute a callback; return those callbacks."""

    def running() -> list[Callback] | None:
        callbacks = [c for c in trace.read().running.values() if c.pid in pids]
        return callbacks if len(callbacks) >= count else None

    return wait_until(
        running,
        timeout=20,
        interval=0.02,
        what=f"{count} callbacks in flight",
    )


def test_sigterm_to_the_main_process__the_step_in_flight_is_recorded_or_retried_never_half(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    (stopping,) = qcluster.start(
        WORKERFLOW_LEASE_SECONDS=LEASE_SECONDS, WORKERFLOW_TICK_BUDGET=TICK_BUDGET
    )
    trace = Trace(tmp_path / "trace")
    pks = start_instances(trace, "stop", INSTANCES)
    workers = worker_pids(stopping)
    flying = in_flight(trace, workers, len(workers))

    began = time.monotonic()
    stopping.process.send_signal(signal.SIGTERM)
    exit_code = stopping.process.wait(STOP_TIMEOUT)
    stop_seconds = time.monotonic() - began

    assert exit_code == 0
    assert not group_alive(stopping.pid), "a process of the stopped cluster lives on"
    left_running = Step.objects.filter(state=StepState.RUNNING).count()
    (successor,) = qcluster.start(WORKERFLOW_LEASE_SECONDS=LEASE_SECONDS)
    drive(pks, timeout=60)

    assert finished_statuses(pks) == {"completed": INSTANCES}
    assert_no_step_running("fault-steps")
    figures = check_steps_recorded_once("fault-steps", trace, atomic_prefix="stop-")
    histories = attempt_histories("fault-steps")
    recorded = retried = 0
    for callback in flying:
        outcome = outcome_of(callback, trace)
        if outcome == StepEventType.ATTEMPT_SUCCEEDED:
            recorded += 1
            assert callback.ended is not None, f"{callback} recorded without its end"
        else:
            assert outcome == (StepEventType.ATTEMPT_FAILED, INTERRUPTED_ERROR_NAME), callback
            attempts = check_attempts(callback.step, histories[callback.step])
            assert attempts.started > trace.attempt_of(callback), f"{callback} not retried"
            retried += 1
    successors = worker_pids(successor)
    assert any(c.pid in successors for c in trace.callbacks), "the next cluster did no work"
    print_figures(
        "SIGTERM to a cluster's main process",
        steps_in_flight=len(flying),
        recorded_by_the_stopping_cluster=recorded,
        retried_by_the_next_cluster=retried,
        left_running_between_clusters=left_running,
        stop_seconds=round(stop_seconds, 1),
        **{name.replace(" ", "_"): value for name, value in figures.items()},
    )


def test_sigterm_to_a_worker_mid_step__records_the_attempt_as_interrupted_and_retries_it(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    (cluster,) = qcluster.start(WORKERFLOW_LEASE_SECONDS=LEASE_SECONDS)
    trace = Trace(tmp_path / "trace")
    (pk,) = start_instances(trace, "term", 1)
    (callback,) = in_flight(trace, worker_pids(cluster), 1)

    os.kill(callback.pid, signal.SIGTERM)
    drive([pk], timeout=30)

    assert finished_statuses([pk]) == {"completed": 1}
    figures = check_steps_recorded_once("fault-steps", trace, atomic_prefix="term-")
    attempts = check_attempts(callback.step, attempt_histories("fault-steps")[callback.step])
    assert (attempts.started, attempts.interrupted, attempts.succeeded) == (2, 1, 1)
    assert figures["interrupted attempts"] == 1
    executions = [c for c in trace.callbacks if c.step == callback.step]
    assert [c.pid == callback.pid for c in executions] == [True, False]
    assert executions[0].ended is None
    assert respawned_workers(cluster) == 1
    print_figures(
        "SIGTERM to a worker mid-step",
        **{name.replace(" ", "_"): value for name, value in figures.items()},
    )


def group_alive(pid: int) -> bool:
    """True while a process of the process group ``pid`` lives."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def outcome_of(callback: Callback, trace: Trace) -> str | tuple[str, str]:
    """How the attempt that ``callback`` executed ended."""
    key, step_id = callback.step
    step = Step.objects.get(instance__key=key, step_id=step_id)
    attempt = trace.attempt_of(callback)
    outcomes = {StepEventType.ATTEMPT_SUCCEEDED, StepEventType.ATTEMPT_FAILED}
    # Stored and derived: a step's success is read from its row. Exactly one outcome.
    (event,) = [
        event
        for event in step_events_of(step.instance_id, [step])
        if event.attempt_number == attempt and event.type in outcomes
    ]
    if event.type == StepEventType.ATTEMPT_SUCCEEDED:
        return event.type
    return (event.type, event.error_name)
