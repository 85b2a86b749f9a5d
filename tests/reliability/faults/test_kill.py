"""SIGKILL of workers in the middle of their work: nothing is lost, nothing recorded twice.

Two clusters run 50 instances of ``fault-steps`` (four steps of 0.2-1 s, plain and atomic).
The test repeatedly SIGKILLs a random worker of the first cluster while it executes a step:
sometimes in the middle of the callback, sometimes just after the callback's effect and
before the outcome is recorded. django-q2's guard replaces each dead worker; the instance it
held is taken over when its lease runs out.

Only workers executing a step are killed: a django-q2 worker that waits for a task blocks in
``multiprocessing.Queue.get()`` holding the queue's read lock, and killing it leaves that
lock held forever, so the whole cluster stops taking tasks (and hangs on SIGTERM). That is a
property of django-q2, not of the engine; the instance a killed worker held is what this
test is about.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import transaction

from django_workerflow import start
from django_workerflow.engine.execution import INTERRUPTED_ERROR_NAME
from django_workerflow.models import StepEventType, WorkflowInstance, WorkflowStatus
from tests.reliability.conftest import print_figures

from .conftest import (
    LEASE_SECONDS,
    Callback,
    Cluster,
    ClusterRunner,
    Trace,
    assert_no_step_running,
    attempt_histories,
    check_steps_recorded_once,
    drive,
    finished_statuses,
    respawned_workers,
    worker_pids,
)

pytestmark = [pytest.mark.reliability, pytest.mark.cluster, pytest.mark.slow]

INSTANCES = 50
STEPS = 4
STEP_SECONDS = (0.2, 1.0)
# How long a callback waits between its effect and returning: the "after the effect" kills
# aim at the middle of it.
LINGER = 0.1
MIN_KILLS = 10
MAX_KILLS = 16
SECONDS_BETWEEN_KILLS = (1.0, 2.0)


@dataclass(frozen=True, slots=True)
class Kill:
    callback: Callback
    moment: str  # "during the callback" or "after the effect"


class Killer:
    """Kills a random busy worker of ``victim`` now and then, until ``MAX_KILLS``."""

    def __init__(self, victim: Cluster, trace: Trace, rng: random.Random) -> None:
        self.victim = victim
        self.trace = trace
        self.rng = rng
        self.kills: list[Kill] = []
        self.next_kill = time.monotonic() + rng.uniform(*SECONDS_BETWEEN_KILLS)

    def __call__(self) -> None:
        if len(self.kills) >= MAX_KILLS or time.monotonic() < self.next_kill:
            return
        target = self._choose()
        if target is None:
            return
        callback, moment, at = target
        time.sleep(max(0.0, at - time.time()))
        os.kill(callback.pid, signal.SIGKILL)
        self.kills.append(Kill(callback, moment))
        self.next_kill = time.monotonic() + self.rng.uniform(*SECONDS_BETWEEN_KILLS)

    def _choose(self) -> tuple[Callback, str, float] | None:
        """A callback in progress in the victim, and when to kill it."""
        workers = worker_pids(self.victim)
        now = time.time()
        candidates = [
            callback
            for pid, callback in self.trace.read().running.items()
            if pid in workers and callback.started + callback.seconds - now > 0.1
        ]
        if not candidates:
            return None
        callback = self.rng.choice(candidates)
        ends = callback.started + callback.seconds
        # After the last step's effect the tick ends soon: a late kill could strike the
        # worker back in the queue (see the module docstring).
        last = callback.step_id == f"step-{STEPS - 1}"
        if last or self.rng.random() < 0.5:
            return callback, "during the callback", now + self.rng.uniform(0, ends - now - 0.05)
        return callback, "after the effect", ends + LINGER / 2


def test_sigkill_of_busy_workers__every_instance_completes_and_each_step_is_recorded_once(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    victim, _ = qcluster.start(2, WORKERFLOW_LEASE_SECONDS=LEASE_SECONDS)
    trace = Trace(tmp_path / "trace")
    seed = random.randrange(2**32)
    print(f"kill seed {seed}")
    killer = Killer(victim, trace, random.Random(seed))
    began = time.monotonic()
    with transaction.atomic():
        pks = [
            start(
                "fault-steps",
                key=f"kill-{index}",
                input={
                    "trace": str(trace.path),
                    "steps": STEPS,
                    "seconds": STEP_SECONDS,
                    "linger": LINGER,
                    # Enough that a step killed again and again still completes.
                    "max_attempts": MAX_KILLS + 1,
                },
            ).pk
            for index in range(INSTANCES)
        ]

    rung = drive(pks, timeout=150, sweep_every=1.0, on_poll=killer, interval=0.02)

    kills = killer.kills
    assert len(kills) >= MIN_KILLS, f"only {len(kills)} kills before the work ended (seed {seed})"
    assert finished_statuses(pks) == {WorkflowStatus.COMPLETED: INSTANCES}
    results = WorkflowInstance.objects.filter(pk__in=pks).values_list("result", flat=True)
    assert set(results) == {STEPS}
    assert_no_step_running("fault-steps")
    figures = check_steps_recorded_once("fault-steps", trace, atomic_prefix="kill-")
    # The attempt each kill struck is recorded as interrupted.
    histories = attempt_histories("fault-steps")
    for kill in kills:
        attempt = trace.attempt_of(kill.callback)
        failed = (StepEventType.ATTEMPT_FAILED, attempt, INTERRUPTED_ERROR_NAME)
        assert failed in [event[:3] for event in histories[kill.callback.step]], kill
    # No callback was abandoned but by a kill.
    killed = {kill.callback.pid for kill in kills}
    assert {callback.pid for callback in trace.read().running.values()} <= killed
    wait_for_workers(victim, 2)
    assert respawned_workers(victim) == len(kills)
    print_figures(
        "SIGKILL of busy workers",
        instances=INSTANCES,
        kills_survived=len(kills),
        during_callback=sum(kill.moment == "during the callback" for kill in kills),
        after_effect=sum(kill.moment == "after the effect" for kill in kills),
        **{name.replace(" ", "_"): value for name, value in figures.items()},
        bells_rung_by_sweep=rung,
        seconds=round(time.monotonic() - began, 1),
        seed=seed,
    )


def wait_for_workers(cluster: Cluster, count: int) -> None:
    """django-q2's guard replaces a dead worker within a guard cycle or two."""
    deadline = time.monotonic() + 10
    while len(worker_pids(cluster)) != count:
        assert time.monotonic() < deadline, f"{cluster.name} has workers {worker_pids(cluster)}"
        time.sleep(0.1)
