"""Steps nested inside a run step: the parent chain each records, and how an inner
retry, wait or failure propagates to the outer run and the workflow.

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
    attempt_failures,
    fail_first_attempt,
    parent_id,
    refreshed,
    step,
)

pytestmark = pytest.mark.django_db


# nested run steps ---------------------------------------------------------------------


def test_nested_run__chains_the_parent_across_three_levels(
    workerflow_harness, define, status_changes
):
    """chains parentStepId across three nested run() levels"""

    def execute(self):
        self.run("L0", lambda: self.run("L1", lambda: self.run("L2", lambda: "deep")))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    for step_id, parent in (("L0", None), ("L1", "L0"), ("L2", "L1")):
        row = step(instance, step_id)
        assert (row.type, row.state) == ("run", "succeeded")
        assert parent_id(instance, step_id) == parent
    assert attempt_failures(instance, "L0") == 0
    assert attempt_failures(instance, "L1") == 0


def test_nested_run__a_root_run_after_a_completed_nested_run_has_no_parent(
    workerflow_harness, define, status_changes
):
    """assigns parentStepId null to a root run() that follows a completed nested run()"""

    def execute(self):
        self.run("nest-outer", lambda: self.run("nest-inner", lambda: 1))
        self.run("root-after", lambda: 2)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    root_after = step(instance, "root-after")
    assert (root_after.type, root_after.state) == ("run", "succeeded")
    assert parent_id(instance, "root-after") is None
    assert parent_id(instance, "nest-inner") == "nest-outer"


def test_nested_run__all_branches_with_nested_runs_complete_with_distinct_parent_chains(
    workerflow_harness, define, status_changes
):
    """Promise.all: parallel branches each with nested run() complete and keep distinct parent chains"""  # noqa: E501 - seed title verbatim

    def execute(self):
        return self.all(
            lambda: self.run("branch-a", lambda: self.run("branch-a-inner", lambda: "a")),
            lambda: self.run("branch-b", lambda: self.run("branch-b-inner", lambda: "b")),
        )

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).result == ["a", "b"]
    expected_parents = {
        "branch-a": None,
        "branch-a-inner": "branch-a",
        "branch-b": None,
        "branch-b-inner": "branch-b",
    }
    for step_id, parent in expected_parents.items():
        row = step(instance, step_id)
        assert (row.type, row.state) == ("run", "succeeded")
        assert parent_id(instance, step_id) == parent
    assert attempt_failures(instance, "branch-a") == 0
    assert attempt_failures(instance, "branch-b") == 0


def test_nested_run__all_settled_records_the_parent_of_a_nested_run_while_another_branch_waits(
    workerflow_harness, define, status_changes
):
    """Promise.allSettled: nested run() in one branch still records parentStepId when the other branch waits

    The seed's workflow completes while the wait still waits (allSettled swallows the
    suspension). In Python all_settled keeps the workflow running until the wait is
    satisfied, then it completes.
    """  # noqa: E501 - the first line is the seed title verbatim

    def execute(self):
        self.all_settled(
            lambda: self.run("nested-branch", lambda: self.run("nested-branch-inner", lambda: 99)),
            lambda: self.wait("parallel-wait-nested", "evt-nested-parallel", timeout=ONE_DAY),
        )

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == []
    assert refreshed(instance).status == "running"
    inner = step(instance, "nested-branch-inner")
    assert (inner.type, inner.state) == ("run", "succeeded")
    assert parent_id(instance, "nested-branch-inner") == "nested-branch"
    wait = step(instance, "parallel-wait-nested")
    assert (wait.type, wait.state) == ("wait", "waiting")

    workerflow.send_event(instance, "evt-nested-parallel")
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert step(instance, "parallel-wait-nested").state == "satisfied"
    assert parent_id(instance, "nested-branch-inner") == "nested-branch"


def test_nested_run__records_the_parent_of_a_sleep_inside_a_run(
    workerflow_harness, define, status_changes
):
    """records parentStepId on sleep() nested inside run()"""

    def execute(self):
        self.run("outer-sleep", lambda: self.sleep("deep-sleep", 0))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    deep_sleep = step(instance, "deep-sleep")
    assert (deep_sleep.type, deep_sleep.state) == ("sleep", "elapsed")
    assert parent_id(instance, "deep-sleep") == "outer-sleep"


def test_nested_run__records_the_parent_of_a_wait_inside_a_run_and_completes_after_the_event(
    workerflow_harness, define, status_changes
):
    """records parentStepId on wait() nested inside run() and completes after handleInboundEvent"""

    def execute(self):
        self.run("outer-wait", lambda: self.wait("deep-wait", "deep-event", timeout=ONE_DAY))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    deep_wait = step(instance, "deep-wait")
    assert (deep_wait.type, deep_wait.state) == ("wait", "waiting")
    assert parent_id(instance, "deep-wait") == "outer-wait"

    workerflow.send_event(instance, "deep-event", {"ok": True})
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    deep_wait = step(instance, "deep-wait")
    assert (deep_wait.type, deep_wait.state) == ("wait", "satisfied")
    assert deep_wait.payload == {"ok": True}
    assert parent_id(instance, "deep-wait") == "outer-wait"
    outer = step(instance, "outer-wait")
    assert (outer.type, outer.state) == ("run", "succeeded")


def test_nested_run__fails_the_workflow_when_a_nested_run_raises_non_retryable_step_error(
    workerflow_harness, define, status_changes
):
    """fails the workflow when a nested run() throws NonRetryableStepError"""

    def fail():
        raise workerflow.NonRetryableStepError("inner only")

    def execute(self):
        self.run("fail-outer", lambda: self.run("fail-inner", fail))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["failed"]
    assert refreshed(instance).status == "failed"
    for step_id in ("fail-inner", "fail-outer"):
        row = step(instance, step_id)
        assert (row.type, row.state, row.error_name) == ("run", "failed", "NonRetryableStepError")


# nested run steps > nested error propagation -----------------------------------------


def test_nested_errors__an_inner_retry_records_no_attempt_failed_on_the_outer_run(
    workerflow_harness, define, status_changes
):
    """does not record attempt_failed on the outer run when the inner run suspends for retry, then completes"""  # noqa: E501 - seed title verbatim
    inner_attempts: list[int] = []

    def execute(self):
        self.run(
            "suspend-outer",
            lambda: self.run("suspend-inner", fail_first_attempt(inner_attempts), max_attempts=3),
        )

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    workerflow_harness.advance(1)  # past the inner step's retry backoff

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert len(inner_attempts) == 2
    assert attempt_failures(instance, "suspend-outer") == 0
    outer = step(instance, "suspend-outer")
    assert (outer.type, outer.state) == ("run", "succeeded")
    inner = step(instance, "suspend-inner")
    assert (inner.type, inner.state) == ("run", "succeeded")


def test_nested_errors__fails_the_workflow_when_the_inner_run_exhausts_its_attempts(
    workerflow_harness, define, status_changes
):
    """fails the workflow when the inner run exhausts maxAttempts

    The seed's outer step records a bare 'Error'; in Python the parent fails non-retryably
    with MaxAttemptsExceededError naming the inner step.
    """

    def fail():
        raise RuntimeError("always fail")

    def execute(self):
        self.run("ex-outer", lambda: self.run("ex-inner", fail, max_attempts=1))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["failed"]
    assert refreshed(instance).status == "failed"
    inner = step(instance, "ex-inner")
    assert (inner.type, inner.state) == ("run", "failed")
    assert inner.error_name == "RuntimeError"
    assert inner.error_message == "RuntimeError: always fail"
    outer = step(instance, "ex-outer")
    assert (outer.type, outer.state) == ("run", "failed")
    assert outer.error_name == "MaxAttemptsExceededError"
    assert outer.error_message == (
        "MaxAttemptsExceededError: Run step 'ex-inner' exhausted its configured attempts."
    )
    assert outer.attempt_count == 1


def test_nested_errors__records_the_outer_failure_when_it_raises_after_the_inner_run_succeeded(
    workerflow_harness, define, status_changes
):
    """records the outer run failure when the outer callback throws after the inner run succeeded"""
    inner_calls: list[int] = []

    def inner():
        inner_calls.append(1)
        return 42

    def outer(self):
        self.run("post-inner", inner)
        raise RuntimeError("outer-only failure")

    def execute(self):
        self.run("post-outer", lambda: outer(self))

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    # The outer step has the default three attempts: let both backoffs pass.
    workerflow_harness.advance(1)
    workerflow_harness.advance(1)

    assert status_changes.settled(instance) == ["failed"]
    assert refreshed(instance).status == "failed"
    post_inner = step(instance, "post-inner")
    assert (post_inner.type, post_inner.state) == ("run", "succeeded")
    assert len(inner_calls) == 1  # later attempts of the outer step replay the inner result
    post_outer = step(instance, "post-outer")
    assert (post_outer.type, post_outer.state) == ("run", "failed")
    assert "outer-only failure" in post_outer.error_message


def test_nested_errors__a_root_run_suspended_by_a_nested_wait_records_no_attempt_failed(
    workerflow_harness, define, status_changes
):
    """does not record attempt_failed on a root run that only suspends via nested wait (child step explains suspend)"""  # noqa: E501 - seed title verbatim

    def execute(self):
        self.run(
            "root-wait-run", lambda: self.wait("root-deep-wait", "root-deep-ev", timeout=ONE_DAY)
        )

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert step(instance, "root-deep-wait").state == "waiting"
    assert attempt_failures(instance, "root-wait-run") == 0

    workerflow.send_event(instance, "root-deep-ev", True)
    workerflow_harness.drain()

    assert status_changes.settled(instance) == ["completed"]
    assert refreshed(instance).status == "completed"
    assert attempt_failures(instance, "root-wait-run") == 0
