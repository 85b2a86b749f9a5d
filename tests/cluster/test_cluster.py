"""Workflows executed by real ``manage.py qcluster`` processes (issue 3's proof).

The workflows live in ``tests/clusterapp/workflows.py`` so that the cluster subprocesses
import them too. Callbacks leave traces in files under the test's tmp path; the tests read
those traces to count executions and to see which process ran what, and when.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django_q.models import OrmQ, Schedule
from django_q.signing import SignedPackage
from django_q.tasks import async_task

from django_workerflow import send_event, start
from django_workerflow.engine.execution import INTERRUPTED_ERROR_NAME, INTERRUPTED_MESSAGE
from django_workerflow.models import (
    Step,
    StepEvent,
    StepEventType,
    StepState,
    StepType,
    WorkflowInstance,
    WorkflowStatus,
    step_events_of,
)
from django_workerflow.runtime import sweeping
from django_workerflow.values.clock import now
from django_workerflow.workers.bells import TICK_TASK
from django_workerflow.workers.sweeper_schedule import (
    SWEEPER_FUNC,
    SWEEPER_NAME,
    ensure_sweeper_schedule,
)

from .conftest import ClusterRunner, wait_until

pytestmark = pytest.mark.cluster

# The two-cluster test: instances, and run steps each (a short sleep sits in the middle).
MANY_INSTANCES = 200
STEPS_PER_INSTANCE = 4


def bells_pending(instance_pk: int) -> int:
    """How many bells for the instance wait in the ORM queue (reads the whole queue)."""
    from django_q.conf import Conf

    count = 0
    for payload in OrmQ.objects.using(Conf.ORM).values_list("payload", flat=True):
        task = SignedPackage.loads(payload)
        if task.get("func") == TICK_TASK and tuple(task.get("args", ())) == (instance_pk,):
            count += 1
    return count


# Helpers ------------------------------------------------------------------------------


def wait_finished(instance_pk: int, *, timeout: float) -> WorkflowInstance:
    return wait_until(
        lambda: WorkflowInstance.objects.filter(pk=instance_pk).finished().first(),
        timeout=timeout,
        what=f"instance {instance_pk} to finish",
    )


def events_of_step(instance_pk: int, step_id: str) -> list[StepEvent]:
    """A step's events, stored and derived (a run step's first start and its success are
    read from its row), in order."""
    step = Step.objects.get(instance_id=instance_pk, step_id=step_id)
    return step_events_of(instance_pk, [step])


def step_events(instance_pk: int, step_id: str) -> list[tuple]:
    """``(type, attempt_number)`` of a step's history, in order."""
    return [(event.type, event.attempt_number) for event in events_of_step(instance_pk, step_id)]


def step_event(instance_pk: int, step_id: str, type: str, attempt: int | None = None) -> StepEvent:
    """The step's one event of ``type`` for ``attempt`` (fails unless there is exactly one)."""
    (event,) = [
        event
        for event in events_of_step(instance_pk, step_id)
        if event.type == type and event.attempt_number == attempt
    ]
    return event


def delete_bells(instance_pk: int) -> list[datetime]:
    """Delete the instance's queued ticks from the ORM queue; return their due times."""
    locks = []
    for row in OrmQ.objects.all():
        task = SignedPackage.loads(row.payload)
        if task.get("func") == TICK_TASK and tuple(task.get("args", ())) == (instance_pk,):
            locks.append(row.lock)
            row.delete()
    return locks


def sleep_until(when: datetime) -> None:
    delay = (when - now()).total_seconds()
    if delay > 0:
        time.sleep(delay)


def worker_pids(runner: ClusterRunner) -> dict[int, str]:
    """Worker pid -> cluster name, from the clusters' "ready for work at <pid>" lines."""
    pids = {}
    for cluster in runner.clusters:
        for line in cluster.log().splitlines():
            if "ready for work at" in line:
                pids[int(line.rsplit(" ", 1)[1])] = cluster.name
    return pids


def callback_runs(trace: Path) -> list[tuple[str, int, float, float]]:
    """``(step_id, pid, started, ended)`` per callback execution recorded in ``trace``.

    Fails unless the executions are strictly sequential: every start is followed by the end
    of the same step in the same process, and no start comes before the previous end.
    """
    lines = [line.split() for line in trace.read_text().splitlines()]
    runs = []
    previous_end = 0.0
    for index in range(0, len(lines), 2):
        opening = lines[index]
        closing = lines[index + 1] if index + 1 < len(lines) else ["(none)", "", "", "0"]
        assert (opening[0], closing[0]) == ("start", "end"), (
            f"{trace.name}: callbacks overlap or one never ended at line {index + 1}: "
            f"{opening} then {closing}"
        )
        assert opening[1:3] == closing[1:3], (
            f"{trace.name}: step {opening[1]} in pid {opening[2]} was followed by the end of "
            f"step {closing[1]} in pid {closing[2]}"
        )
        started, ended = float(opening[3]), float(closing[3])
        assert started >= previous_end, (
            f"{trace.name}: step {opening[1]} started at {started} before the previous step "
            f"ended at {previous_end}"
        )
        previous_end = ended
        runs.append((opening[1], int(opening[2]), started, ended))
    return runs


def delete_sweeper_schedule() -> None:
    """Leave recovery to the test's own sweep() call, so what recovered the instance is
    known (the schedule itself is covered by the schedule tests below)."""
    Schedule.objects.filter(name=SWEEPER_NAME).delete()


# A workflow in the background ---------------------------------------------------------


@pytest.mark.slow
def test_cluster__runs_a_retry_a_sleep_and_a_wait_to_completion(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    qcluster.start()
    instance = start("cluster-journey", key="journey", input={"dir": str(tmp_path)})
    wait_until(
        lambda: Step.objects.filter(
            instance=instance, step_id="approval", state=StepState.WAITING
        ).exists(),
        timeout=15,
        what="the wait step",
    )
    send_event("journey", "approved", {"by": "ops"})

    finished = wait_finished(instance.pk, timeout=15)

    assert finished.status == WorkflowStatus.COMPLETED
    assert finished.result == {"tries": 2, "approval": {"by": "ops"}}
    assert len((tmp_path / "journey.flaky").read_text().splitlines()) == 2
    assert step_events(instance.pk, "flaky") == [
        (StepEventType.ATTEMPT_STARTED, 1),
        (StepEventType.ATTEMPT_FAILED, 1),
        (StepEventType.ATTEMPT_STARTED, 2),
        (StepEventType.ATTEMPT_SUCCEEDED, 2),
    ]
    failed = step_event(instance.pk, "flaky", StepEventType.ATTEMPT_FAILED, 1)
    assert failed.error_name == "RuntimeError"
    assert failed.next_attempt_at == failed.recorded_at + timedelta(seconds=0.25)
    retried = step_event(instance.pk, "flaky", StepEventType.ATTEMPT_STARTED, 2)
    assert retried.recorded_at >= failed.next_attempt_at
    nap = Step.objects.get(instance=instance, step_id="nap")
    assert nap.state == StepState.ELAPSED
    # wake_at is computed from the clock just before the step row is stamped.
    assert abs(nap.wake_at - nap.created_at - timedelta(seconds=1)) < timedelta(seconds=0.1)
    assert nap.resolved_at >= nap.wake_at
    approval = Step.objects.get(instance=instance, step_id="approval")
    assert (approval.state, approval.payload) == (StepState.SATISFIED, {"by": "ops"})
    assert step_events(instance.pk, "finish") == [
        (StepEventType.ATTEMPT_STARTED, 1),
        (StepEventType.ATTEMPT_SUCCEEDED, 1),
    ]


# Ownership ----------------------------------------------------------------------------


@pytest.mark.slow
def test_two_clusters__never_run_one_instances_steps_concurrently_and_record_each_once(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    count = MANY_INSTANCES
    qcluster.start(2)
    keys = [f"many-{index}" for index in range(count)]
    # Released together when the transaction commits, so both clusters race for them.
    with transaction.atomic():
        for key in keys:
            instance = start(
                "cluster-steps", key=key, input={"dir": str(tmp_path), "steps": STEPS_PER_INSTANCE}
            )
            # An extra bell, queued right behind the real one: two workers race for it.
            async_task(TICK_TASK, instance.pk, task_name=f"extra tick {instance.pk}", save=False)

    wait_until(
        lambda: (
            WorkflowInstance.objects.filter(definition_name="cluster-steps").finished().count()
            == count
        ),
        timeout=90,
        interval=0.2,
        what=f"{count} instances to finish",
    )

    instances = WorkflowInstance.objects.filter(definition_name="cluster-steps")
    assert Counter(instances.values_list("status", flat=True)) == {WorkflowStatus.COMPLETED: count}
    assert set(instances.values_list("result", flat=True)) == {STEPS_PER_INSTANCE}
    step_ids = {f"step-{index}" for index in range(STEPS_PER_INSTANCE)}
    runs = {key: callback_runs(tmp_path / f"{key}.trace") for key in keys}
    callbacks = Counter((key, step_id) for key in keys for step_id, *_ in runs[key])
    assert set(callbacks) == {(key, step_id) for key in keys for step_id in step_ids}
    assert set(callbacks.values()) == {1}
    # Stored and derived events: a run step's first start and its success are on its row.
    events = [
        (instance.key, event)
        for instance in instances
        for event in step_events_of(
            instance, list(Step.objects.filter(instance=instance, type=StepType.RUN))
        )
    ]
    for event_type in (StepEventType.ATTEMPT_STARTED, StepEventType.ATTEMPT_SUCCEEDED):
        recorded = Counter(
            (key, event.step.step_id) for key, event in events if event.type == event_type
        )
        assert len(recorded) == count * STEPS_PER_INSTANCE, event_type
        assert set(recorded.values()) == {1}, event_type
    assert not [event for _, event in events if event.type == StepEventType.ATTEMPT_FAILED]
    # Both clusters did part of the work.
    clusters = worker_pids(qcluster)
    used = {clusters.get(pid) for key in keys for _, pid, *_ in runs[key]}
    assert used == {cluster.name for cluster in qcluster.clusters}


# Crash recovery -----------------------------------------------------------------------


@pytest.mark.slow
def test_sigkill_mid_step__is_recovered_after_the_lease_expires(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    delete_sweeper_schedule()
    qcluster.start(WORKERFLOW_LEASE_SECONDS="3")
    instance = start("cluster-crash", key="crash", input={"dir": str(tmp_path)})
    attempts = tmp_path / "crash.attempts"
    killed = int(
        wait_until(
            lambda: attempts.exists() and attempts.read_text().partition("\n")[0],
            timeout=15,
            what="the first attempt to start",
        )
    )

    os.kill(killed, signal.SIGKILL)
    time.sleep(0.5)
    held = WorkflowInstance.objects.get(pk=instance.pk)
    assert held.lease_token is not None
    # No schedule runs, but the cluster's own fast sweeper chain (WORKERFLOW_SWEEP_SECONDS)
    # rings the instance once its lease has expired: nothing else has to call sweep().
    finished = wait_finished(instance.pk, timeout=30)

    assert finished.status == WorkflowStatus.COMPLETED
    pids = [int(line) for line in attempts.read_text().splitlines()]
    assert len(pids) == 2
    assert pids[1] != killed
    assert finished.result == f"recovered after pid {pids[1]}"
    assert step_events(instance.pk, "slow") == [
        (StepEventType.ATTEMPT_STARTED, 1),
        (StepEventType.ATTEMPT_FAILED, 1),
        (StepEventType.ATTEMPT_STARTED, 2),
        (StepEventType.ATTEMPT_SUCCEEDED, 2),
    ]
    interrupted = step_event(instance.pk, "slow", StepEventType.ATTEMPT_FAILED, 1)
    assert interrupted.error_name == INTERRUPTED_ERROR_NAME
    assert interrupted.error_message == INTERRUPTED_MESSAGE
    assert interrupted.recorded_at > held.lease_expires_at
    assert interrupted.next_attempt_at == interrupted.recorded_at + timedelta(seconds=0.25)
    retried = step_event(instance.pk, "slow", StepEventType.ATTEMPT_STARTED, 2)
    assert retried.recorded_at >= interrupted.next_attempt_at


@pytest.mark.slow
def test_lost_bell__is_rung_again_by_the_sweep(qcluster: ClusterRunner) -> None:
    delete_sweeper_schedule()
    qcluster.start()
    instance = start("cluster-nap", key="nap")
    wait_until(
        lambda: WorkflowInstance.objects.filter(
            pk=instance.pk, lease_token__isnull=True, steps__step_id="nap"
        ).exists(),
        timeout=15,
        what="the sleep to be recorded",
    )
    nap = Step.objects.get(instance=instance, step_id="nap")

    locks = delete_bells(instance.pk)

    assert nap.wake_at in locks
    sleep_until(nap.wake_at + timedelta(seconds=1.5))
    assert Step.objects.get(pk=nap.pk).state == StepState.WAITING
    sleep_until(nap.wake_at + sweeping.SWEEP_GRACE + timedelta(seconds=0.2))
    assert sweeping.sweep() >= 1
    finished = wait_finished(instance.pk, timeout=15)
    assert (finished.status, finished.result) == (WorkflowStatus.COMPLETED, "awake")
    nap.refresh_from_db()
    assert nap.state == StepState.ELAPSED
    assert nap.resolved_at >= nap.wake_at + sweeping.SWEEP_GRACE


# Bells and transactions ---------------------------------------------------------------


@pytest.mark.slow
def test_start_in_a_rolled_back_transaction__rings_nothing(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    # DEBUG: django-q2's "processing" lines about the engine's bells are logged.
    qcluster.start(WORKERFLOW_Q_LOG_LEVEL="DEBUG")
    marker = tmp_path / "rolled-back"
    started = []

    def start_then_roll_back() -> None:
        with transaction.atomic():
            started.append(start("cluster-touch", key="rolled-back", input={"path": str(marker)}))
            assert bells_pending(started[0].pk) == 1
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError, match="roll back"):
        start_then_roll_back()

    pk = started[0].pk
    assert not WorkflowInstance.objects.filter(key="rolled-back").exists()
    assert bells_pending(pk) == 0
    time.sleep(1)
    assert not marker.exists()
    log = qcluster.log()
    assert f"processing workerflow tick {qcluster.probe_pks[0]} '" in log
    assert f"processing workerflow tick {pk} '" not in log


# The sweeper schedule -----------------------------------------------------------------


def sweeper_schedules() -> list[tuple]:
    return list(
        Schedule.objects.filter(name=SWEEPER_NAME).values_list(
            "func", "schedule_type", "minutes", "repeats"
        )
    )


@pytest.mark.django_db
def test_sweeper_schedule__exists_once_after_migrate_and_ensuring_it_twice_keeps_one() -> None:
    expected = [(SWEEPER_FUNC, Schedule.MINUTES, 1, -1)]
    assert sweeper_schedules() == expected

    ensure_sweeper_schedule()
    ensure_sweeper_schedule()

    assert sweeper_schedules() == expected


@pytest.mark.django_db
def test_sweeper_schedule__duplicates_and_edits_are_repaired() -> None:
    Schedule.objects.filter(name=SWEEPER_NAME).update(minutes=15)
    Schedule.objects.create(name=SWEEPER_NAME, func="print", schedule_type=Schedule.HOURLY)

    ensure_sweeper_schedule()

    assert sweeper_schedules() == [(SWEEPER_FUNC, Schedule.MINUTES, 1, -1)]
