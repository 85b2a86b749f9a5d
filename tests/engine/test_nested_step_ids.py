"""A nested step id reached under another parent than the one it was recorded under is a
duplicate on every replay, not only in the pass that first reaches both."""

from __future__ import annotations

import pytest

import django_workerflow as workerflow
from django_workerflow.models import Step, WorkflowStatus

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("suspend_between", [False, True], ids=["same-pass", "across-sleep"])
def test_run__the_same_nested_id_under_two_parents_is_a_duplicate_step_id(
    define, workerflow_harness, suspend_between
):
    calls = []

    def inner(label):
        calls.append(label)
        return label

    def execute(self):
        first = self.run("p1", lambda: self.run("x", lambda: inner("under p1")))
        if suspend_between:
            self.sleep("pause", 60)
        second = self.run("p2", lambda: self.run("x", lambda: inner("under p2")))
        return [first, second]

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    workerflow_harness.advance(60)
    instance.refresh_from_db()
    assert (instance.status, instance.error_name) == (
        WorkflowStatus.FAILED,
        "DuplicateStepIdError",
    )
    assert "'x'" in instance.error_message
    assert calls == ["under p1"]
    assert Step.objects.filter(instance=instance, step_id="x").count() == 1


def test_wait__a_satisfied_nested_wait_is_not_handed_to_another_parent(define, workerflow_harness):
    def execute(self):
        first = self.run("p1", lambda: self.wait("x", "go"))
        self.sleep("pause", 60)
        return [first, self.run("p2", lambda: self.wait("x", "go"))]

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    workerflow.send_event(instance.key, "go", 1)
    workerflow_harness.drain()
    workerflow_harness.advance(60)
    instance.refresh_from_db()
    assert (instance.status, instance.error_name) == (
        WorkflowStatus.FAILED,
        "DuplicateStepIdError",
    )
