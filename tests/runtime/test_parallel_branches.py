"""Parallel branches with ``all`` and ``all_settled``: a waiting branch keeps the
workflow running, a failed branch is reported without losing the others.

Each test's docstring starts with the seed title verbatim (see tests/SEED.md). The seed
waits for ``onStatusChange_experimental``; here ``harness.drain()`` (and ``advance()`` for
retry backoffs) runs the instance as far as it goes, and the ``status_changes`` fixture
records what the seed's callback would have seen.
"""

from __future__ import annotations

import pytest

import django_workerflow as workerflow
from tests.support.instances import (
    ONE_DAY,
    refreshed,
    step,
)

pytestmark = pytest.mark.django_db


# Promise.allSettled -> all_settled ----------------------------------------------------


def test_all_settled__keeps_the_workflow_running_until_the_wait_is_satisfied_then_completes(
    workerflow_harness, define, status_changes
):
    """swallows SuspendWorkflowError so the workflow completes while a wait step is still waiting

    The seed's behaviour is a JavaScript artifact: a workflow must never complete while one
    of its steps still waits. all_settled waits until every branch has settled.
    """
    run_calls: list[int] = []

    def execute(self):
        results = self.all_settled(
            lambda: self.run("parallel-run", lambda: run_calls.append(1) or 1),
            lambda: self.wait("parallel-wait", "parallel-event", timeout=ONE_DAY),
        )
        return [[result.ok, result.value] for result in results]

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == []
    assert refreshed(instance).status == "running"
    assert instance.steps.count() == 2
    run_step = step(instance, "parallel-run")
    assert (run_step.type, run_step.state) == ("run", "succeeded")
    wait = step(instance, "parallel-wait")
    assert (wait.type, wait.state) == ("wait", "waiting")

    workerflow.send_event(instance, "parallel-event", {"answer": 42})
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert instance.result == [[True, 1], [True, {"answer": 42}]]
    assert step(instance, "parallel-wait").state == "satisfied"
    assert len(run_calls) == 1


def test_all_settled__completes_the_workflow_despite_a_non_retryable_branch_failure(
    workerflow_harness, define, status_changes
):
    """swallows NonRetryableStepError so the workflow completes despite a failed run step"""

    def fail():
        raise workerflow.NonRetryableStepError("branch failed")

    def execute(self):
        results = self.all_settled(
            lambda: self.run("parallel-fail", fail),
            lambda: self.run("parallel-ok", lambda: 1),
        )
        return [result.ok for result in results]

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert instance.result == [False, True]
    assert instance.steps.count() == 2
    failed = step(instance, "parallel-fail")
    assert (failed.type, failed.state, failed.error_name) == (
        "run",
        "failed",
        "NonRetryableStepError",
    )
    ok = step(instance, "parallel-ok")
    assert (ok.type, ok.state) == ("run", "succeeded")


def test_all_settled__suspends_the_workflow_even_when_the_caller_reraises_failed_results(
    workerflow_harness, define, status_changes
):
    """forwards suspend when the caller rethrows after inspecting settled results

    In Python the suspension never reaches the settled results: all_settled itself
    suspends while the wait waits, so the caller's re-raise loop only runs once every branch
    has settled. The seed's assertions hold; the event then completes the workflow.
    """

    def execute(self):
        results = self.all_settled(
            lambda: self.run("allsettled-rerun-run", lambda: 1),
            lambda: self.wait("allsettled-rerun-wait", "allsettled-rerun-event", timeout=ONE_DAY),
        )
        for result in results:
            if not result.ok:
                raise result.error

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert refreshed(instance).status == "running"
    assert status_changes.settled(instance) == []
    wait = step(instance, "allsettled-rerun-wait")
    assert (wait.type, wait.state) == ("wait", "waiting")
    run_step = step(instance, "allsettled-rerun-run")
    assert (run_step.type, run_step.state) == ("run", "succeeded")

    workerflow.send_event(instance, "allsettled-rerun-event")
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]


# Promise.all -> all -------------------------------------------------------------------


def test_all__keeps_the_workflow_running_with_a_waiting_branch(
    workerflow_harness, define, status_changes
):
    """propagates SuspendWorkflowError so the workflow stays running with a waiting step

    The seed's run branch may still be mid-flight ('running'); in Python all() lets every
    branch progress in the same tick, so the run has succeeded while the wait waits.
    """

    def execute(self):
        return self.all(
            lambda: self.run("parallel-run", lambda: 1),
            lambda: self.wait("parallel-wait", "parallel-event", timeout=ONE_DAY),
        )

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert refreshed(instance).status == "running"
    assert status_changes.settled(instance) == []
    wait = step(instance, "parallel-wait")
    assert (wait.type, wait.state) == ("wait", "waiting")
    run_step = step(instance, "parallel-run")
    assert (run_step.type, run_step.state) == ("run", "succeeded")

    workerflow.send_event(instance, "parallel-event", "payload")
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).result == [1, "payload"]
