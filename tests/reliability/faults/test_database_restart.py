"""PostgreSQL restarted while clusters work: they reconnect, nothing is stuck or lost.

The restart breaks every connection. A tick whose database write fails ends with the error
(its step stays 'running' under a lease nobody renews); django-q2's pusher and monitor die
and are replaced. When the lease runs out, the sweeper rings the instance again and the next
tick records the interrupted attempt and retries it. Bells queued in the database survive.

A worker whose callback runs through the restart finds its connections broken only when the
callback returns; the last two tests pin down what must happen then: a failing step is
retried (the workflow does not fail with the database error), and the lease of a step that
outlasts it stays with its worker (the heartbeat reconnects).
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from django.db import transaction

from django_workerflow import start
from django_workerflow.models import Step, StepState, StepType, WorkflowInstance, WorkflowStatus
from tests.reliability.conftest import print_figures

from .conftest import (
    LEASE_SECONDS,
    ON_POSTGRES,
    Callback,
    ClusterRunner,
    Trace,
    assert_no_step_running,
    attempt_histories,
    check_attempts,
    check_steps_recorded_once,
    drive,
    finished_statuses,
    pg_cluster,
    postgresql_kept_up,
    restart_postgresql,
    wait_until,
)

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.skipif(
        not ON_POSTGRES, reason="restarts the PostgreSQL server; SQLite has no server"
    ),
    pytest.mark.skipif(
        ON_POSTGRES and pg_cluster() is None,
        reason="needs the PostgreSQL server on this machine, controlled by pg_ctlcluster",
    ),
]

INSTANCES = 30
STEPS = 4
STEP_SECONDS = (0.2, 0.6)
NAP = 1.0
# Longer than the restart takes (about 3 s): a worker that renews its lease when the database
# is back keeps it.
LONG_LEASE = "6"


def test_postgresql_restart_mid_run__workers_reconnect_and_every_instance_completes(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    qcluster.start(2, WORKERFLOW_LEASE_SECONDS=LEASE_SECONDS)
    trace = Trace(tmp_path / "trace")
    with transaction.atomic():
        pks = [
            start(
                "fault-steps",
                key=f"restart-{index}",
                input={
                    "trace": str(trace.path),
                    "steps": STEPS,
                    "seconds": STEP_SECONDS,
                    "nap": NAP,
                    "max_attempts": 5,
                },
            ).pk
            for index in range(INSTANCES)
        ]
    # Mid-run: some instances done, steps in flight, sleeps waiting for their bells.
    recorded = Step.objects.filter(type=StepType.RUN, state=StepState.SUCCEEDED)
    wait_until(
        lambda: recorded.count() >= INSTANCES,
        timeout=30,
        interval=0.1,
        what="a quarter of the steps to be recorded",
    )
    in_flight = len(trace.read().running)
    sleeping = Step.objects.filter(type=StepType.SLEEP, state=StepState.WAITING).count()
    began = time.monotonic()

    with postgresql_kept_up():
        downtime = restart_postgresql()
        rung = drive(pks, timeout=90, sweep_every=1.0)

    recovery = time.monotonic() - began
    assert finished_statuses(pks) == {"completed": INSTANCES}
    assert set(WorkflowInstance.objects.filter(pk__in=pks).values_list("result", flat=True)) == {
        STEPS
    }
    assert_no_step_running("fault-steps")
    assert not WorkflowInstance.objects.filter(pk__in=pks, lease_token__isnull=False).exists()
    figures = check_steps_recorded_once(
        "fault-steps", trace, atomic_prefix="restart-", database_errors_in_atomic_steps=True
    )
    assert Step.objects.filter(type=StepType.SLEEP, state=StepState.ELAPSED).count() == INSTANCES
    log = qcluster.log()
    print_figures(
        "PostgreSQL restart",
        restarts=1,
        instances=INSTANCES,
        callbacks_in_flight_at_restart=in_flight,
        sleeps_waiting_at_restart=sleeping,
        downtime_seconds=round(downtime, 1),
        seconds_to_recover_all=round(recovery, 1),
        ticks_failed=log.count("Failed 'django_workerflow.tasks.tick'"),
        processes_respawned=log.count("reincarnated"),
        leases_taken_over=log.count("taking over an expired lease"),
        bells_rung_by_sweep=rung,
        **{name.replace(" ", "_"): value for name, value in figures.items()},
    )


def in_flight_after_a_renewal(trace: Trace, instance_pk: int) -> Callback:
    """Wait until the instance's callback runs and its heartbeat has renewed the lease once
    (so the lease has its whole length ahead); return the callback."""
    (callback,) = wait_until(
        lambda: list(trace.read().running.values()), timeout=20, what="the callback to start"
    )
    leased = WorkflowInstance.objects.filter(pk=instance_pk).values_list(
        "lease_expires_at", flat=True
    )
    claimed = leased.get()
    wait_until(lambda: leased.get() != claimed, timeout=10, what="a lease renewal")
    return callback


def test_postgresql_restart_then_a_failing_step__the_step_is_retried_not_the_workflow_failed(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    qcluster.start(WORKERFLOW_LEASE_SECONDS=LONG_LEASE)
    trace = Trace(tmp_path / "trace")
    go = tmp_path / "go"
    instance = start(
        "fault-fails-later", key="fails-later", input={"trace": str(trace.path), "go": str(go)}
    )
    in_flight_after_a_renewal(trace, instance.pk)

    with postgresql_kept_up():
        restart_postgresql()
        # The callback fails now, on the far side of the restart.
        go.touch()
        drive([instance.pk], timeout=45)

    finished = WorkflowInstance.objects.get(pk=instance.pk)
    assert (finished.status, finished.error_message) == (WorkflowStatus.COMPLETED, "")
    assert finished.result == "retried"
    history = attempt_histories("fault-fails-later")[("fails-later", "flaky")]
    attempts = check_attempts(("fails-later", "flaky"), history)
    assert (attempts.started, attempts.succeeded) == (2, 1)
    failure = next(event for event in history if event[0] == "attempt_failed")
    assert failure[2] in {"RuntimeError", "StepInterruptedError"}, failure
    assert trace.executions() == {("fails-later", "flaky"): 2}


def test_postgresql_restart_during_a_step_longer_than_the_lease__no_other_worker_runs_it_too(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    qcluster.start(WORKERFLOW_LEASE_SECONDS=LONG_LEASE)
    trace = Trace(tmp_path / "trace")
    seconds = 2 * float(LONG_LEASE)
    instance = start(
        "fault-long-step",
        key="long",
        input={"trace": str(trace.path), "marker": str(tmp_path / "marker"), "seconds": seconds},
    )
    first = in_flight_after_a_renewal(trace, instance.pk)

    with postgresql_kept_up():
        restart_postgresql()
        # django-q2's pusher pauses 10 s after a database error: a fresh cluster is ready
        # to take the instance over as soon as its lease has really run out.
        qcluster.start(WORKERFLOW_LEASE_SECONDS=LONG_LEASE)
        drive([instance.pk], timeout=60)

    wait_until(
        lambda: first.ended or first.pid not in trace.read().running,
        timeout=seconds,
        what="the first execution to end",
    )
    executions = [callback for callback in trace.read().callbacks if callback.step_id == "long"]
    overlapping = [
        (earlier.pid, later.pid)
        for earlier, later in itertools.pairwise(executions)
        if earlier.ended is None or later.started < earlier.ended
    ]
    assert overlapping == [], f"two workers executed the step at once: {executions}"
    finished = WorkflowInstance.objects.get(pk=instance.pk)
    assert finished.status == WorkflowStatus.COMPLETED
    history = attempt_histories("fault-long-step")[("long", "long")]
    attempts = check_attempts(("long", "long"), history)
    assert attempts.started == len(executions)
    print_figures(
        "PostgreSQL restart during a step longer than the lease",
        executions=len(executions),
        interrupted_attempts=attempts.interrupted,
    )
