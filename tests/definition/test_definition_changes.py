"""A definition that changes under a running instance: the engine reports it, and an
instance whose code is gone waits untouched until the code is back."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

import django_workerflow as workerflow
from django_workerflow import registry
from django_workerflow.models import WorkflowInstance

pytestmark = pytest.mark.django_db


def test_replay__reports_recorded_steps_it_no_longer_reaches(define, workerflow_harness, caplog):
    shape = {"version": 1}

    def execute(self):
        self.run("a", lambda: 1)
        if shape["version"] == 1:
            self.sleep("b", 60)
        else:
            self.sleep("c", 60)

    definition = define(execute)
    instance = workerflow.start(definition, key="changing")
    workerflow_harness.drain()
    shape["version"] = 2
    WorkflowInstance.objects.filter(pk=instance.pk).update(alarm_at=workerflow_harness.now())
    with caplog.at_level(logging.WARNING, logger="django_workerflow"):
        workerflow_harness.drain()
    instance.refresh_from_db()
    assert instance.unreached_step_ids == ["b"]
    assert "no longer reaches recorded steps key=changing" in caplog.text
    assert "steps=b" in caplog.text


def test_replay__of_an_unchanged_definition_reports_nothing(define, workerflow_harness):
    def execute(self):
        self.run("a", lambda: 1)
        self.sleep("b", 60)
        return "done"

    instance = workerflow.start(define(execute), key="steady")
    workerflow_harness.drain()
    workerflow_harness.advance(timedelta(minutes=2))
    instance.refresh_from_db()
    assert instance.status == "completed"
    assert instance.unreached_step_ids is None


def test_tick__leaves_an_instance_whose_version_is_not_registered_untouched_until_it_is_back(
    define, workerflow_harness, caplog
):
    calls = []

    def execute(self):
        self.run("a", lambda: calls.append("a"))
        self.sleep("nap", 30)
        self.run("b", lambda: calls.append("b"))
        return "done"

    definition = define(execute)
    instance = workerflow.start(definition, key="orphan")
    workerflow_harness.drain()
    registry.unregister(definition)
    steps_before = list(instance.steps.values_list("step_id", "state"))
    with caplog.at_level(logging.WARNING, logger="django_workerflow"):
        workerflow_harness.advance(40)
    instance.refresh_from_db()
    assert instance.status == "running"
    assert list(instance.steps.values_list("step_id", "state")) == steps_before
    assert "definition not registered key=orphan" in caplog.text

    registry.register(definition)
    workerflow_harness.advance(timedelta(minutes=2))
    instance.refresh_from_db()
    assert instance.status == "completed"
    assert calls == ["a", "b"]


def test_replay__does_not_expect_steps_nested_in_a_finished_run_step(define, workerflow_harness):
    def execute(self):
        self.run("outer", lambda: self.run("inner", lambda: 1))
        self.sleep("nap", 60)
        return "done"

    instance = workerflow.start(define(execute), key="nested")
    workerflow_harness.drain()
    workerflow_harness.advance(timedelta(minutes=2))
    instance.refresh_from_db()
    assert instance.status == "completed"
    assert instance.unreached_step_ids is None
