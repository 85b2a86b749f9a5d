"""Scenario ``tasks``: Django's tasks framework, on our backend and on django-tasks-db's.

The same trivial ``@task`` (``bench.benchapp.tasks.nothing``) is measured through the
framework's public API on each backend, with its own workers, in this run:

- ours: one ``manage.py qcluster`` (``Q_CLUSTER["workers"]`` processes);
- django-tasks-db's ``DatabaseBackend``: as many ``manage.py db_worker`` processes (one
  task at a time each), polling every 50 ms like our cluster's ``poll``.

Start latency: from just before ``enqueue()`` to the result's ``started_at``, one task every
``task_spacing`` seconds. Throughput: ``task_drain`` tasks enqueued in one transaction,
from its commit to the last ``finished_at``, and the CPU the workers' processes and the
server's backends spent per task meanwhile (:mod:`bench.process_cpu`): on a small machine
the drain is bound by it. django-tasks-db is installed only in the
benchmark's venv (``.[bench]``); without it its rows say "skipped".
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from .cluster import running_cluster, warm_up
from .common import REPO, Sizes, distribution, wait_until
from .process_cpu import CpuMeter

#: django-tasks-db's worker sleeps this long when its queue is empty (our poll's value).
DB_WORKER_INTERVAL = "0.05"


def tasks_scenario(sizes: Sizes, workdir: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    from django.conf import settings

    if "default" not in getattr(settings, "TASKS", {}):
        return {"skipped": "neither django.tasks nor the django-tasks backport is installed"}
    from bench.benchapp.tasks import nothing

    workers = settings.Q_CLUSTER["workers"]
    results: dict[str, Any] = {"workers": workers}
    progress("tasks on our backend, one cluster")
    with running_cluster(workdir / "tasks-qcluster.log") as cluster:
        warm_up("tasks")
        results["ours"] = measure(nothing, sizes, _ours_finished, [cluster.process.pid])
    if "database" not in settings.TASKS or not importlib.util.find_spec("django_tasks_db"):
        results["django_tasks_db"] = {"skipped": "django-tasks-db is not installed"}
        return results
    progress(f"tasks on django-tasks-db, {workers} db_worker processes")
    database = nothing.using(backend="database")
    with ExitStack() as stack:
        processes = [
            stack.enter_context(db_worker(workdir / f"tasks-db-worker-{index}.log"))
            for index in range(workers)
        ]
        _wait_result(database.enqueue(), timeout=60)  # the workers have started
        results["django_tasks_db"] = measure(
            database, sizes, _database_finished, [process.pid for process in processes]
        )
    return results


def measure(
    task: Any,
    sizes: Sizes,
    finished: Callable[[list[str]], tuple[int, Any]],
    workers: list[int],
) -> dict:
    """Start latency (one task at a time), then a drain of ``task_drain`` tasks, with the
    CPU per task of the processes ``workers`` (and their children) and of the server."""
    sent: list[tuple[datetime, Any]] = []
    for _ in range(sizes.task_latency):
        before = timezone.now()
        sent.append((before, task.enqueue()))
        time.sleep(sizes.task_spacing)
    latencies = [
        (_wait_result(result).started_at - before).total_seconds() for before, result in sent
    ]
    meter = CpuMeter(workers)
    meter.start()
    began = time.perf_counter()
    with transaction.atomic():
        ids = [task.enqueue().id for _ in range(sizes.task_drain)]
    enqueue_seconds = time.perf_counter() - began
    released = timezone.now()

    def drained() -> bool:
        meter.sample()
        return finished(ids)[0] >= len(ids)

    # Polled slowly: the count is a query the server runs beside the drain (the times are
    # the rows' own, so the polling's pace does not change the figure).
    wait_until(drained, timeout=600, what=f"{len(ids)} tasks to finish", interval=0.5)
    seconds = (finished(ids)[1] - released).total_seconds()
    cpu = meter.seconds()
    return {
        "cpu_ms_per_task": {
            role: None if used is None else used * 1000 / len(ids) for role, used in cpu.items()
        },
        "start_latency": distribution(latencies),
        "tasks": len(ids),
        "enqueues_per_second": len(ids) / enqueue_seconds,
        "drain_seconds": seconds,
        "tasks_per_second": len(ids) / seconds,
    }


def _wait_result(result: Any, timeout: float = 120) -> Any:
    def done() -> bool:
        result.refresh()
        return result.is_finished

    wait_until(done, timeout=timeout, what=f"task {result.id} to finish")
    if result.status != "SUCCESSFUL":
        raise RuntimeError(f"Task {result.id} finished {result.status}: {result.errors}")
    return result


def _ours_finished(ids: list[str]) -> tuple[int, Any]:
    from django.db.models import Count, Max

    from django_workerflow.models import WorkflowInstance

    done = WorkflowInstance.objects.filter(key__in=ids, status="completed").aggregate(
        count=Count("id"), last=Max("finished_at")
    )
    return done["count"], done["last"]


def _database_finished(ids: list[str]) -> tuple[int, Any]:
    from django.db.models import Count, Max
    from django_tasks_db.models import DBTaskResult

    done = DBTaskResult.objects.filter(id__in=ids, status="SUCCESSFUL").aggregate(
        count=Count("id"), last=Max("finished_at")
    )
    return done["count"], done["last"]


@contextmanager
def db_worker(log_path: Path) -> Iterator[subprocess.Popen]:
    """One ``manage.py db_worker`` of django-tasks-db for the "database" alias."""
    log = log_path.open("wb")
    command = [sys.executable, str(REPO / "manage.py"), "db_worker", "--backend", "database"]
    command += ["--interval", DB_WORKER_INTERVAL, "--no-startup-delay", "--no-reload"]
    process = subprocess.Popen(
        command,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log.close()
