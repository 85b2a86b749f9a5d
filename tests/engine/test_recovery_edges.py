"""Taking over a dead worker's lease: only the step that was running its own code was
interrupted; steps suspended by a child go on with the same attempt.

A worker's death is simulated by a callback raising a ``BaseException`` the engine does not
catch: the tick stops where it is, leaving its lease and its 'running' steps behind.
"""

from __future__ import annotations

import pytest

import django_workerflow as workerflow
from django_workerflow.engine.execution import INTERRUPTED_ERROR_NAME
from django_workerflow.models import Step, StepEvent, StepEventType, WorkflowStatus
from tests.support.failures import WorkerDiedError, dies_once
from tests.support.instances import lease_runs_out

pytestmark = pytest.mark.django_db


def failed_attempts(instance, step_id: str) -> list[str]:
    return list(
        StepEvent.objects.filter(
            step__instance=instance, step__step_id=step_id, type=StepEventType.ATTEMPT_FAILED
        ).values_list("error_name", flat=True)
    )


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_take_over__a_parent_whose_wait_was_satisfied_after_the_death_was_not_interrupted(
    define, workerflow_harness, max_attempts
):
    crashy = dies_once()

    def execute(self):
        return self.all(
            lambda: self.run("outer", lambda: self.wait("inner", "go"), max_attempts=max_attempts),
            lambda: self.run("crashy", crashy),
        )

    instance = workerflow.start(define(execute))
    with pytest.raises(WorkerDiedError):
        workerflow_harness.drain()
    workerflow.send_event(instance.key, "go", {"n": 1})
    lease_runs_out(workerflow_harness)

    instance.refresh_from_db()
    assert (instance.status, instance.result) == (WorkflowStatus.COMPLETED, [{"n": 1}, "ok"])
    outer = Step.objects.get(instance=instance, step_id="outer")
    assert outer.attempt_count == 1
    assert failed_attempts(instance, "outer") == []
    assert failed_attempts(instance, "crashy") == [INTERRUPTED_ERROR_NAME]


def test_take_over__a_parent_that_died_in_its_own_code_after_a_satisfied_wait_was_interrupted(
    define, workerflow_harness
):
    crash = dies_once()

    def outer(self):
        payload = self.wait("inner", "go")
        crash()
        return payload

    instance = workerflow.start(define(lambda self: self.run("outer", lambda: outer(self))))
    workerflow.send_event(instance.key, "go", 7)  # queued: the wait claims it when reached
    with pytest.raises(WorkerDiedError):
        workerflow_harness.drain()
    lease_runs_out(workerflow_harness)

    instance.refresh_from_db()
    assert (instance.status, instance.result) == (WorkflowStatus.COMPLETED, 7)
    assert failed_attempts(instance, "outer") == [INTERRUPTED_ERROR_NAME]


def test_take_over__a_parent_that_died_after_its_child_succeeded_was_interrupted(
    define, workerflow_harness
):
    crash = dies_once()

    def outer(self):
        # atomic: the child's success commits before the death (a plain step's success is
        # written with the next write, so the death would lose it and re-run the child:
        # tests/engine/test_step_outcome_durability.py).
        value = self.run("inner", lambda: 5, atomic=True)
        crash()
        return value

    instance = workerflow.start(define(lambda self: self.run("outer", lambda: outer(self))))
    with pytest.raises(WorkerDiedError):
        workerflow_harness.drain()
    lease_runs_out(workerflow_harness)

    instance.refresh_from_db()
    assert (instance.status, instance.result) == (WorkflowStatus.COMPLETED, 5)
    assert failed_attempts(instance, "outer") == [INTERRUPTED_ERROR_NAME]
    assert failed_attempts(instance, "inner") == []
