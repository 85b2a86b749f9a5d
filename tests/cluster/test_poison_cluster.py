"""Poison tasks on a real cluster: a task that calls ``exit()`` fails with ``SystemExit``
and its worker process lives on to run the next task; a task that SIGKILLs its own worker
fails with ``WorkerLostError`` after 3 interrupted attempts instead of killing workers for
ever. Only the framework's public API reads the outcome; the figures say how long it took.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from django_workerflow import WorkerLostError
from tests.clusterapp import tasks
from tests.reliability.conftest import print_figures

from .conftest import ClusterRunner, wait_until
from .test_worker_recovery import wait_for_heartbeat

try:  # Django 6
    from django.tasks import TaskResultStatus
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

#: A short lease: a killed attempt is found interrupted soon (3 are needed).
FAST_RECOVERY = {"WORKERFLOW_LEASE_SECONDS": "3", "WORKERFLOW_SWEEP_SECONDS": "1"}


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def finished(result) -> bool:
    result.refresh()
    return result.is_finished


def test_exit__the_task_fails_with_system_exit_and_the_worker_lives_on(
    qcluster: ClusterRunner, tmp_path
):
    qcluster.start(WORKERFLOW_TEST_WORKERS="1")
    path = tmp_path / "exits"
    failed = tasks.exits.enqueue(str(path))
    wait_until(lambda: finished(failed), timeout=30, what="the exiting task to finish")
    after = tasks.exits.enqueue(str(path))
    wait_until(lambda: finished(after), timeout=30, what="the next task to finish")

    assert failed.status == TaskResultStatus.FAILED
    [error] = failed.errors
    assert error.exception_class_path == "builtins.SystemExit"
    assert "leaving early" in error.traceback
    assert failed.attempts == 1
    # One worker process ran both: exit() did not end it.
    assert len(set(lines(path))) == 1
    assert after.worker_ids == failed.worker_ids


def test_sigkill__the_task_fails_with_worker_lost_after_three_interrupted_attempts(
    qcluster: ClusterRunner, tmp_path
):
    qcluster.start(**FAST_RECOVERY)
    wait_for_heartbeat()
    path = tmp_path / "kills"
    enqueued_at = time.time()
    result = tasks.kills_its_worker.enqueue(str(path))
    wait_until(lambda: finished(result), timeout=120, what="the poison task to finish")
    print_figures(
        "poison task (SIGKILL), lease 3 s",
        attempts=len(lines(path)),
        seconds_to_failed=f"{time.time() - enqueued_at:.1f}",
    )

    assert result.status == TaskResultStatus.FAILED
    assert len(lines(path)) == 3  # three workers killed, then no more
    assert len(set(lines(path))) == 3
    assert result.attempts == 3
    [error] = result.errors
    assert error.exception_class is WorkerLostError
    assert "interrupted 3 times in a row" in error.traceback
    # The cluster still works: the next task runs.
    after = tasks.add.enqueue(1, 2)
    wait_until(lambda: finished(after), timeout=30, what="the next task")
    assert after.status == TaskResultStatus.SUCCESSFUL
