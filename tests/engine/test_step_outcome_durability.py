"""One synchronous commit per run step (issue 15): a step's success is written together with
the start of the next run step, and its outcome is durable before any later callback starts,
before the instance suspends, finishes or yields, and before anything outside the tick reads it.

A worker's death is simulated by workflow code raising a ``BaseException`` the engine does
not catch: the tick stops where it is, leaving its lease and whatever it had not written.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

import django_workerflow as workerflow
from django_workerflow.engine.execution import INTERRUPTED_ERROR_NAME
from django_workerflow.models import (
    Step,
    StepEvent,
    StepEventType,
    StepState,
    WorkflowStatus,
    step_events_of,
)
from django_workerflow.runtime.tick import tick
from tests.support.failures import WorkerDiedError
from tests.support.instances import lease_runs_out

pytestmark = pytest.mark.django_db


def states(instance) -> dict[str, str]:
    return dict(Step.objects.filter(instance=instance).values_list("step_id", "state"))


def events(instance, step_id: str) -> list[str]:
    return [event.type for event in step_events_of(instance) if event.step.step_id == step_id]


def test_crash_right_after_a_callback_returns__re_runs_that_step_only(define, workerflow_harness):
    calls = {"a": 0, "b": 0, "c": 0}
    deaths = [1]

    def step(name):
        def callback():
            calls[name] += 1
            return name

        return callback

    def execute(self):
        a = self.run("a", step("a"))
        b = self.run("b", step("b"))
        if deaths:
            deaths.pop()
            raise WorkerDiedError()  # b's callback returned; its success is not written yet
        return [a, b, self.run("c", step("c"))]

    instance = workerflow.start(define(execute))
    with pytest.raises(WorkerDiedError):
        workerflow_harness.drain()

    # a's success was committed with b's start; b's died with the worker.
    assert states(instance) == {"a": StepState.SUCCEEDED, "b": StepState.RUNNING}
    lease_runs_out(workerflow_harness)

    instance.refresh_from_db()
    assert (instance.status, instance.result) == (WorkflowStatus.COMPLETED, ["a", "b", "c"])
    assert calls == {"a": 1, "b": 2, "c": 1}
    assert events(instance, "b") == [
        StepEventType.ATTEMPT_STARTED,
        StepEventType.ATTEMPT_FAILED,
        StepEventType.ATTEMPT_STARTED,
        StepEventType.ATTEMPT_SUCCEEDED,
    ]
    assert StepEvent.objects.get(
        step__instance=instance, step__step_id="b", type=StepEventType.ATTEMPT_FAILED
    ).error_name == (INTERRUPTED_ERROR_NAME)


def test_crash_inside_a_parent__re_runs_the_child_whose_success_was_held(
    define, workerflow_harness
):
    deaths = [1]
    inner_calls = []

    def outer(self):
        value = self.run("inner", lambda: inner_calls.append(1) or 5)
        if deaths:
            deaths.pop()
            raise WorkerDiedError()
        return value

    instance = workerflow.start(define(lambda self: self.run("outer", lambda: outer(self))))
    with pytest.raises(WorkerDiedError):
        workerflow_harness.drain()
    lease_runs_out(workerflow_harness)

    instance.refresh_from_db()
    assert (instance.status, instance.result) == (WorkflowStatus.COMPLETED, 5)
    assert len(inner_calls) == 2
    # The parent was suspended by its (interrupted) child, not interrupted itself.
    assert StepEventType.ATTEMPT_FAILED not in events(instance, "outer")


def test_pause_arriving_between_two_steps__records_the_first_and_starts_nothing(
    define, workerflow_harness
):
    calls = {"a": 0, "b": 0}

    def execute(self):
        self.run("a", lambda: calls.__setitem__("a", calls["a"] + 1))
        if calls["b"] == 0:
            workerflow.pause(self.key)  # an operator, between a's return and b's start
        self.run("b", lambda: calls.__setitem__("b", calls["b"] + 1))
        return "done"

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.PAUSED
    assert states(instance) == {"a": StepState.SUCCEEDED}
    assert events(instance, "a") == [
        StepEventType.ATTEMPT_STARTED,
        StepEventType.ATTEMPT_SUCCEEDED,
    ]

    calls["b"] = -1  # do not pause again
    workerflow.resume(instance)
    workerflow_harness.drain()
    instance.refresh_from_db()
    assert (instance.status, instance.result) == (WorkflowStatus.COMPLETED, "done")
    assert calls == {"a": 1, "b": 0}


@pytest.mark.parametrize("ending", ["sleep", "finish", "fail"])
def test_outcome__is_durable_before_the_instance_suspends_finishes_or_fails(
    define, workerflow_harness, ending
):
    def execute(self):
        value = self.run("only", lambda: 7)
        if ending == "sleep":
            self.sleep("rest", 60)
        if ending == "fail":
            raise ValueError("after the step")
        return value

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    instance.refresh_from_db()
    expected = {"sleep": "running", "finish": "completed", "fail": "failed"}[ending]
    assert instance.status == expected
    assert Step.objects.get(instance=instance, step_id="only").state == StepState.SUCCEEDED
    assert events(instance, "only")[-1] == StepEventType.ATTEMPT_SUCCEEDED


def test_outcome__is_durable_before_the_worker_yields(define, workerflow_harness):
    def execute(self):
        return [self.run(f"s{n}", lambda n=n: n) for n in range(3)]

    instance = workerflow.start(define(execute))
    with override_settings(WORKERFLOW_TICK_BUDGET=0):
        result = tick(instance.pk)

    assert result.outcome == "yielded"
    assert states(instance) == {"s0": StepState.SUCCEEDED}


def test_atomic_step__commits_its_success_in_its_own_transaction(define, workerflow_harness):
    calls = []
    deaths = [1]

    def execute(self):
        self.run("atomic", lambda: calls.append(1) or "once", atomic=True)
        if deaths:
            deaths.pop()
            raise WorkerDiedError()
        return "done"

    instance = workerflow.start(define(execute))
    with pytest.raises(WorkerDiedError):
        workerflow_harness.drain()

    assert states(instance) == {"atomic": StepState.SUCCEEDED}
    lease_runs_out(workerflow_harness)
    instance.refresh_from_db()
    assert (instance.status, calls) == (WorkflowStatus.COMPLETED, [1])
