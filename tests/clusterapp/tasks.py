"""``django.tasks`` functions that the tests enqueue, in the harness and on real clusters.

Side effects go to files under a directory the test passes, one line per call (see
``append_line``), so a test counts attempts and reads which process ran what, and when.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from django_workerflow import start
from django_workerflow.testing import WorkerDeath

from .workflows import append_line

try:  # Django 6
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskContext, task


class TaskBoomError(Exception):
    """What :func:`boom` raises: a class of the project's own, named by its path."""


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def pair(value: Any) -> tuple[Any, dict[str, Any]]:
    """A tuple comes back as a list: the framework's JSON round trip."""
    return (value, {"value": value})


@task()
def boom(message: str) -> None:
    raise TaskBoomError(message)


@task(queue_name="retries")
def flaky(path: str, failures: int) -> int:
    """Fail the first ``failures`` attempts, then return the attempt count."""
    tries = append_line(path, str(os.getpid()))
    if tries <= failures:
        raise ValueError(f"attempt {tries} fails on purpose")
    return tries


@task(takes_context=True)
def with_context(context: TaskContext, label: str) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt, "label": label}


@task(takes_context=True, queue_name="retries")
def flaky_with_context(context: TaskContext, path: str) -> dict[str, Any]:
    """Fail the first attempt, then return what the context says of this attempt."""
    append_line(path, str(context.attempt))
    if context.attempt == 1:
        raise ValueError("the first attempt fails on purpose")
    return {"attempt": context.attempt, "errors": len(context.task_result.errors)}


@task()
async def async_add(a: int, b: int) -> int:
    return a + b


@task()
async def async_stamp(path: str) -> list[int]:
    """A coroutine that awaits before it records its process: (the pid, the tries)."""
    await asyncio.sleep(0.01)
    return [os.getpid(), append_line(path, str(os.getpid()))]


@task(queue_name="serial")
def record(path: str, label: str) -> str:
    """Append ``label`` and the time: a test reads the order tasks of the queue ran in."""
    append_line(path, f"{label} {time.time():.6f}")
    return label


@task(queue_name="serial")
def hold(path: str, seconds: float) -> None:
    """Hold the serial queue's only slot for ``seconds`` (a different function than
    :func:`record`: the limit holds across both)."""
    append_line(path, f"hold {time.time():.6f}")
    time.sleep(seconds)


@task()
def slow_once(path: str, seconds: float) -> int:
    """The first attempt records its process id and sleeps (a test kills it there)."""
    tries = append_line(path, str(os.getpid()))
    if tries == 1:
        time.sleep(seconds)
    return tries


@task()
def stamp(path: str) -> float:
    """Record when it ran (wall clock): a deferred task must never run early."""
    now = time.time()
    append_line(path, f"{now:.6f}")
    return now


@task()
def start_probe(key: str) -> str:
    """A task that starts a workflow."""
    return start("cluster-probe", key=key).key


@task()
def nothing() -> None:
    """A trivial task (the benchmark's)."""


class WorkerDiedError(WorkerDeath):
    """Stands for a worker dying mid-attempt: nothing in the engine catches it."""


@task()
def dies_once(path: str) -> int:
    """The first attempt 'dies' (raises what a killed process never returns from)."""
    tries = append_line(path, str(os.getpid()))
    if tries == 1:
        raise WorkerDiedError
    return tries


@task()
def exits(path: str) -> None:
    """Call ``exit()`` (a SystemExit): the attempt fails, the worker process lives on."""
    append_line(path, str(os.getpid()))
    exit("leaving early")


@task()
def interrupted_by_hand() -> None:
    """Raise ``KeyboardInterrupt``, as code that re-raises a Ctrl-C does."""
    raise KeyboardInterrupt("stopped by hand")


@task()
def kills_its_worker(path: str) -> None:
    """Kill the worker process that runs it (SIGKILL: nothing is recorded)."""
    append_line(path, str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)


@task()
def dies_always(path: str) -> None:
    """Every attempt 'dies' (see :func:`dies_once`)."""
    append_line(path, str(os.getpid()))
    raise WorkerDiedError
