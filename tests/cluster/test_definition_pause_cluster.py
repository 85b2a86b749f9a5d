"""Pausing a definition on a real qcluster: running instances stop at their next step
boundary, nothing of the definition runs while it is paused (across a cluster restart), and
resuming finishes every instance with each step run once. Run with ``-s`` for the figures."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

import django_workerflow as workerflow
from django_workerflow.models import Step, WorkflowInstance, WorkflowStatus
from tests.reliability.conftest import print_figures

from .conftest import ClusterRunner, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NAME = "cluster-steps"
INSTANCES = 4
STEPS = 200
QUIET = 3.0


def trace_lines(directory: Path) -> list[tuple[str, str, str, float]]:
    """(key, event, step id, time) of every callback start and end, in no particular order."""
    lines = []
    for trace in directory.glob("*.trace"):
        for line in trace.read_text().splitlines():
            event, step_id, _pid, at = line.split()
            lines.append((trace.stem, event, step_id, float(at)))
    return lines


def test_pause_definition__holds_a_running_definition_across_a_restart(
    qcluster: ClusterRunner, tmp_path: Path
):
    qcluster.start()
    keys = [f"paused-{n}" for n in range(INSTANCES)]
    for key in keys:
        workerflow.start(NAME, key=key, input={"dir": str(tmp_path), "steps": STEPS})
    wait_until(
        lambda: len({line[0] for line in trace_lines(tmp_path)}) == INSTANCES,
        timeout=60,
        what="every instance to run a step",
    )

    assert workerflow.pause_definition(NAME, reason="cluster test", actor="pytest")
    paused_at = time.time()
    returned = datetime.fromtimestamp(paused_at, UTC)
    held = WorkflowInstance.objects.filter(definition_name=NAME, key__in=keys)
    wait_until(
        lambda: not held.filter(lease_token__isnull=False).exists(),
        timeout=30,
        what="every tick of the definition to let its instance go",
    )
    released_after = time.time() - paused_at
    time.sleep(QUIET)
    before_restart = trace_lines(tmp_path)
    # A step's row is created with the time read before its start statement: one created
    # after pause_definition() returned began after it, and must have been refused. (A
    # callback may still begin after it returned: its attempt started before.)
    started_after_pause = Step.objects.filter(
        instance__definition_name=NAME, created_at__gt=returned
    ).count()
    callbacks_after_pause = [
        line for line in before_restart if line[1] == "start" and line[3] > paused_at
    ]
    last_end = max(line[3] for line in before_restart if line[1] == "end")

    for cluster in qcluster.clusters:
        cluster.stop()
    qcluster.start()  # a new cluster: the pause is in the database
    time.sleep(QUIET)
    assert workerflow.is_definition_paused(NAME)
    after_restart = trace_lines(tmp_path)
    assert sorted(after_restart) == sorted(before_restart), "a step ran while paused"
    unfinished = held.exclude(status=WorkflowStatus.COMPLETED).count()

    workerflow.resume_definition(NAME, actor="pytest")
    resumed_at = time.time()
    wait_until(
        lambda: held.filter(status=WorkflowStatus.COMPLETED).count() == INSTANCES,
        timeout=120,
        what="every instance to complete after the resume",
    )
    first_start_after_resume = min(
        line[3] for line in trace_lines(tmp_path) if line[1] == "start" and line[3] > resumed_at
    )

    print_figures(
        "definition paused on a real cluster",
        instances=INSTANCES,
        steps_done_at_pause=sum(1 for line in before_restart if line[1] == "end"),
        unfinished_at_resume=unfinished,
        step_starts_after_pause_returned=started_after_pause,
        callbacks_begun_after_pause_returned=len(callbacks_after_pause),
        last_step_end_after_pause_ms=f"{(last_end - paused_at) * 1000:.1f}",
        all_leases_released_after_ms=f"{released_after * 1000:.0f}",
        first_step_after_resume_ms=f"{(first_start_after_resume - resumed_at) * 1000:.0f}",
        all_completed_after_resume_s=f"{time.time() - resumed_at:.1f}",
    )
    assert started_after_pause == 0
    assert len(callbacks_after_pause) <= INSTANCES  # at most each tick's attempt in flight
    assert unfinished == INSTANCES
    starts = Counter(
        (key, step) for key, event, step, _ in trace_lines(tmp_path) if event == "start"
    )
    assert set(starts.values()) == {1}, "a step ran twice"
    assert len(starts) == INSTANCES * STEPS
    assert all(instance.result == STEPS for instance in held)
