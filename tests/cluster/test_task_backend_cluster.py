"""django.tasks on real clusters: a task whose worker is killed mid-attempt runs again
(and that attempt does not use up its one attempt), a deferred task never starts before
its ``run_after``, a queue's waiting tasks start in priority order, and a coroutine task
runs in a worker process.

Only the framework's public API reads the outcome (``enqueue``, ``get_result``,
``refresh``); the figures printed say how long things took.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from tests.clusterapp import tasks
from tests.reliability.conftest import print_figures

from .conftest import ClusterRunner, wait_until
from .test_worker_recovery import DEFAULTS, wait_for_heartbeat

try:  # Django 6
    from django.tasks import TaskResultStatus
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def finished(result) -> bool:
    result.refresh()
    return result.is_finished


def test_killed_worker__the_task_runs_again_without_using_up_its_attempt(
    qcluster: ClusterRunner, tmp_path
):
    qcluster.start(**DEFAULTS)
    wait_for_heartbeat()
    path = tmp_path / "slow"
    result = tasks.slow_once.enqueue(str(path), 60)
    pid = int(wait_until(lambda: lines(path), timeout=30, what="the first attempt")[0])
    wait_until(
        lambda: tasks.slow_once.get_result(result.id).status == TaskResultStatus.RUNNING,
        timeout=10,
        what="the task to read as running",
    )
    time.sleep(1.0)
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: finished(result), timeout=60, what="the task to finish")

    rerun_at = path.stat().st_mtime
    print_figures("task kill-to-rerun, default settings", seconds=f"{rerun_at - killed_at:.1f}")
    assert result.status == TaskResultStatus.SUCCESSFUL  # max_attempts is 1: not used up
    assert result.return_value == 2
    assert result.attempts == 2  # the killed attempt, then the one that ran it again
    assert result.worker_ids[0] == ""  # the killed attempt recorded no worker
    assert not result.worker_ids[1].endswith(f":{pid}")  # another process ran it again
    assert result.errors == []  # an interrupted attempt raised nothing
    assert len(lines(path)) == 2


def test_run_after__a_deferred_task_starts_on_its_bell_never_early(
    qcluster: ClusterRunner, tmp_path
):
    qcluster.start()
    results = []
    for index in range(5):
        run_after = timezone.now() + timedelta(seconds=2 + index * 0.5)
        path = tmp_path / f"stamp-{index}"
        results.append((run_after, path, tasks.stamp.using(run_after=run_after).enqueue(str(path))))
        assert tasks.stamp.get_result(results[-1][2].id).status == TaskResultStatus.READY

    lateness = []
    for run_after, path, result in results:
        wait_until(lambda result=result: finished(result), timeout=30, what="the deferred task")
        assert result.status == TaskResultStatus.SUCCESSFUL, [e.traceback for e in result.errors]
        ran_at = float(lines(path)[0])
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert ran_at >= run_after.timestamp()  # never early
        assert result.started_at >= run_after
        lateness.append(ran_at - run_after.timestamp())
    lateness.sort()
    print_figures(
        "run_after to the task's start (5 tasks)",
        median_ms=f"{lateness[2] * 1000:.0f}",
        max_ms=f"{lateness[-1] * 1000:.0f}",
    )


def test_priority__a_queue_s_waiting_tasks_start_larger_priority_first(
    qcluster: ClusterRunner, tmp_path
):
    qcluster.start()
    path = tmp_path / "order"
    holder = tasks.hold.enqueue(str(path), 2)
    wait_until(lambda: lines(path), timeout=30, what="the holder to take the queue's slot")
    waiting = []
    for index in range(4):
        waiting.append(tasks.record.using(priority=-50).enqueue(str(path), f"low-{index}"))
        waiting.append(tasks.record.using(priority=50).enqueue(str(path), f"high-{index}"))
    for result in [holder, *waiting]:
        wait_until(lambda result=result: finished(result), timeout=60, what="the queue to drain")
        assert result.status == TaskResultStatus.SUCCESSFUL

    order = [line.split()[0] for line in lines(path)]
    print_figures("serial queue start order", order=" ".join(order))
    assert order[0] == "hold"
    assert [label.split("-")[0] for label in order[1:]] == ["high"] * 4 + ["low"] * 4


def test_async_task__a_coroutine_task_runs_in_a_worker_process(qcluster: ClusterRunner, tmp_path):
    qcluster.start()
    path = tmp_path / "async"
    enqueued_at = time.time()
    result = tasks.async_stamp.enqueue(str(path))
    wait_until(lambda: finished(result), timeout=30, what="the coroutine task to finish")

    print_figures(
        "coroutine task, enqueue to finished",
        ms=f"{(result.finished_at.timestamp() - enqueued_at) * 1000:.0f}",
    )
    assert result.status == TaskResultStatus.SUCCESSFUL, [e.traceback for e in result.errors]
    pid, tries = result.return_value
    assert pid != os.getpid()  # a worker ran it, not this process
    assert tries == 1
    assert lines(path) == [str(pid)]
    assert result.attempts == 1
    assert result.worker_ids[0].endswith(f":{pid}")
