"""A tick yields its worker once its time budget is spent, and always makes progress."""

from __future__ import annotations

import pytest

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance
from django_workerflow.runtime.tick import tick

pytestmark = pytest.mark.django_db


def test_tick__yields_after_its_budget_and_resumes_where_it_stopped(
    define, workerflow_harness, settings
):
    settings.WORKERFLOW_TICK_BUDGET = 0.0
    calls = []

    def execute(self):
        for number in range(3):
            self.run(f"step-{number}", lambda number=number: calls.append(number))
        return "done"

    instance = workerflow.start(define(execute), key="budget")
    outcomes = []
    for _ in range(2):
        outcomes.append(tick(instance.pk).outcome)
        instance.refresh_from_db()
        assert instance.alarm_at == workerflow_harness.now()
    outcomes.append(tick(instance.pk).outcome)
    # One new step per tick: the budget is spent before the second one of each tick.
    assert outcomes == ["yielded", "yielded", "completed"]
    assert calls == [0, 1, 2]
    assert WorkflowInstance.objects.get(pk=instance.pk).result == "done"


def test_tick__with_time_left_runs_every_step_in_one_go(define, workerflow_harness):
    def execute(self):
        for number in range(20):
            self.run(f"step-{number}", lambda: None)

    instance = workerflow.start(define(execute))
    assert tick(instance.pk).outcome == "completed"
