"""Scenario ``composition``, with one real ``manage.py qcluster``: how soon ``wait_result``
returns after an instance finished, and how soon a parent resumes after its child finished.

Finish times are the instances' ``finished_at``, written by the worker; the return time is
read on the engine's clock in this process right after ``wait_result`` returns, and the
resume time is the parent's next step starting (a step event the worker writes).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from .cluster import (
    attempts_started_at,
    running_cluster,
    seconds_between,
    wait_finished,
    warm_up,
)
from .common import Sizes, distribution, wait_until


def composition(sizes: Sizes, workdir: Path, progress: Any) -> dict[str, Any]:
    with running_cluster(workdir / "qcluster-composition.log"):
        warm_up("m")
        progress("finish -> wait_result returns")
        returns = finish_to_return("m", sizes)
        progress("child finish -> parent resumes")
        resumes = child_finish_to_parent_resume("m", sizes)
    return {
        "finish_to_return": distribution(returns),
        "child_finish_to_parent_resume": distribution(resumes),
    }


def _waiting(keys: list[str], step_id: str) -> None:
    from django_workerflow.models import WorkflowInstance

    waiting = WorkflowInstance.objects.filter(
        key__in=keys, lease_token__isnull=True, steps__step_id=step_id
    )
    wait_until(
        lambda: waiting.count() == len(keys), timeout=60, what=f"every instance at '{step_id}'"
    )


def _send_later(key: str, delay: float) -> threading.Thread:
    """Send 'go' from another thread (its own connection) while this one waits."""
    from django.db import connection

    from django_workerflow import send_event

    def body() -> None:
        try:
            time.sleep(delay)
            send_event(key, "go")
        finally:
            connection.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def finish_to_return(run: str, sizes: Sizes) -> list[float]:
    """From the instance's ``finished_at`` to ``wait_result`` returning, one at a time."""
    from django_workerflow import start, wait_result
    from django_workerflow.models import WorkflowInstance
    from django_workerflow.values.clock import now

    keys = [f"{run}-result-{index}" for index in range(sizes.events)]
    for key in keys:
        start("bench-event", key=key)
    _waiting(keys, "go")
    returned: dict[str, datetime] = {}
    for key in keys:
        sender = _send_later(key, sizes.spacing)
        wait_result(key, timeout=60)
        returned[key] = now()
        sender.join()
    finished = dict(WorkflowInstance.objects.filter(key__in=keys).values_list("key", "finished_at"))
    return [seconds_between(returned[key], finished[key]) for key in keys]


def child_finish_to_parent_resume(run: str, sizes: Sizes) -> list[float]:
    """From the child's ``finished_at`` to the parent's next step starting."""
    from django_workerflow import send_event, start
    from django_workerflow.models import Step, WorkflowInstance

    parents = [f"{run}-parent-{index}" for index in range(sizes.events)]
    for key in parents:
        start("bench-parent", key=key)
    children = [f"{key}/child" for key in parents]
    wait_until(
        lambda: WorkflowInstance.objects.filter(key__in=children).count() == len(children),
        timeout=60,
        what="every child to start",
    )
    _waiting(children, "go")
    for key in children:
        send_event(key, "go")
        time.sleep(sizes.spacing)
    wait_finished(f"{run}-parent-", sizes.events * 2)  # the children share the prefix
    finished = dict(
        WorkflowInstance.objects.filter(key__in=children).values_list("key", "finished_at")
    )
    resumed = attempts_started_at(
        Step.objects.filter(instance__key__in=parents, step_id="after-child"), 1
    )
    return [seconds_between(resumed[key], finished[f"{key}/child"]) for key in parents]
