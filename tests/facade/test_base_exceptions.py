"""A BaseException that user code raises (``exit()``, ``KeyboardInterrupt``) fails the
attempt it escapes, recorded with its class, instead of escaping the worker; the engine's
own control flow still passes through (see ``values.control_flow.passes_through``)."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest

import django_workerflow as workerflow
from django_workerflow import WorkerLostError
from django_workerflow.models import WorkflowInstance, step_events_of
from django_workerflow.testing import Harness, WorkerDeath
from django_workerflow.values.control_flow import (
    ExecutionStopped,
    Suspension,
    TickAborted,
    passes_through,
)
from django_workerflow.values.states import StopReason
from tests.clusterapp import tasks
from tests.support.instances import refreshed, step

try:  # Django 6
    from django.tasks import TaskResultStatus
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus

pytestmark = pytest.mark.django_db


class HostTimeout(SystemExit):
    """Named as django-q2's task timeout is (its worker is destroyed after it)."""


HostTimeout.__module__ = "django_q.exceptions"
HostTimeout.__qualname__ = "TimeoutException"


@pytest.mark.parametrize(
    "exc",
    [
        Suspension(),
        ExecutionStopped(StopReason.STOPPED),
        TickAborted(),
        WorkerDeath(),
        GeneratorExit(),
        HostTimeout(),
    ],
)
def test_passes_through__the_engine_s_and_the_host_s_own_signals(exc):
    assert passes_through(exc)


@pytest.mark.parametrize(
    "exc", [SystemExit(1), KeyboardInterrupt(), ValueError("x"), BaseException("own")]
)
def test_passes_through__not_what_user_code_raises(exc):
    assert not passes_through(exc)


def test_task__exit_fails_it_with_system_exit_and_the_worker_takes_the_next(harness, tmp_path):
    path = tmp_path / "exits"
    failed = tasks.exits.enqueue(str(path))
    after = tasks.add.enqueue(1, 2)
    harness.drain()  # nothing escapes: the "worker" goes on to the next task
    failed.refresh()
    after.refresh()

    assert failed.status == TaskResultStatus.FAILED
    [error] = failed.errors
    assert error.exception_class_path == "builtins.SystemExit"
    assert "leaving early" in error.traceback
    assert failed.attempts == 1
    assert after.status == TaskResultStatus.SUCCESSFUL


def test_task__keyboard_interrupt_fails_it_with_its_class(harness):
    result = tasks.interrupted_by_hand.enqueue()
    harness.drain()
    result.refresh()

    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == ["builtins.KeyboardInterrupt"]
    assert "stopped by hand" in result.errors[0].traceback


@pytest.mark.parametrize(
    ("raised", "name"),
    [(SystemExit("bye"), "SystemExit"), (KeyboardInterrupt("bye"), "KeyboardInterrupt")],
)
def test_step__a_base_exception_fails_the_attempt_and_is_retried(
    workerflow_harness, define, raised, name
):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise raised
        return "ok"

    def execute(self):
        return self.run("flaky", flaky, max_attempts=2, backoff=lambda attempt: 0)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    instance = refreshed(instance)
    assert instance.status == "completed"
    assert instance.result == "ok"
    [failure] = [e for e in step_events_of(instance) if e.type == "attempt_failed"]
    assert failure.error_name == name
    assert "bye" in failure.error_message
    assert f"{name}: bye" in failure.traceback


def test_step__exit_on_the_last_attempt_fails_the_instance(workerflow_harness, define):
    def execute(self):
        return self.run("leaves", exit, max_attempts=1)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    instance = refreshed(instance)
    assert instance.status == "failed"
    assert step(instance, "leaves").error_name == "SystemExit"


def test_workflow_code__exit_outside_a_step_fails_the_instance(workerflow_harness, define):
    def execute(self):
        self.run("first", lambda: 1)
        raise SystemExit("the workflow left")

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    instance = refreshed(instance)
    assert instance.status == "failed"
    assert instance.error_name == "SystemExit"
    assert "the workflow left" in instance.error_message


def test_branches__exit_in_a_branch_is_that_branch_s_failure(workerflow_harness, define):
    def execute(self):
        settled = self.all_settled(lambda: self.run("a", lambda: 1), lambda: exit("b quits"))
        return [outcome.ok for outcome in settled]

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    assert refreshed(instance).result == [True, False]


# Attempts that kill their worker ---------------------------------------------------------


def _run_until_settled(harness: Harness, rounds: int) -> None:
    """Drain, letting each 'dead' attempt's lease run out, ``rounds`` times."""
    for _ in range(rounds):
        with contextlib.suppress(WorkerDeath):
            harness.advance(timedelta(minutes=5))  # past the dead attempt's lease


def test_poison_task__fails_with_worker_lost_after_three_interrupted_attempts(harness, tmp_path):
    path = tmp_path / "dies"
    result = tasks.dies_always.enqueue(str(path))
    _run_until_settled(harness, 6)
    result.refresh()

    assert len(path.read_text().splitlines()) == 3
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3
    [error] = result.errors
    assert error.exception_class is WorkerLostError
    assert "interrupted 3 times in a row" in error.traceback
    instance = WorkflowInstance.objects.get(key=result.id)
    assert instance.error_name == "WorkerLostError"


def test_poison_task__the_backend_option_sets_the_limit(settings, db, tmp_path):
    settings.TASKS = {
        "default": {
            **settings.TASKS["default"],
            "OPTIONS": {"max_interrupted_attempts": 2},
        }
    }
    with Harness() as harness:
        path = tmp_path / "dies"
        result = tasks.dies_always.enqueue(str(path))
        _run_until_settled(harness, 4)
        result.refresh()

    assert len(path.read_text().splitlines()) == 2
    assert result.status == TaskResultStatus.FAILED


def test_poison_step__fails_the_instance_with_worker_lost_after_the_setting_s_limit(
    workerflow_harness, define, settings
):
    settings.WORKERFLOW_MAX_INTERRUPTED_ATTEMPTS = 2
    calls = []

    def dies():
        calls.append(1)
        raise WorkerDeath

    def execute(self):
        return self.run("dies", dies, max_attempts=10, backoff=lambda attempt: 0)

    instance = workerflow.start(define(execute))
    _run_until_settled(workerflow_harness, 5)

    instance = refreshed(instance)
    assert len(calls) == 2
    assert instance.status == "failed"
    assert instance.error_name == "WorkerLostError"
    assert "interrupted 2 times in a row" in instance.error_message
    assert step(instance, "dies").error_name == "WorkerLostError"


def test_poison_step__a_failure_between_interruptions_starts_the_count_again(
    workerflow_harness, define, settings
):
    settings.WORKERFLOW_MAX_INTERRUPTED_ATTEMPTS = 2
    calls = []

    def sometimes_dies():
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("an ordinary failure")
        if len(calls) < 4:
            raise WorkerDeath
        return "ok"

    def execute(self):
        return self.run("flaky", sometimes_dies, max_attempts=10, backoff=lambda attempt: 0)

    instance = workerflow.start(define(execute))
    _run_until_settled(workerflow_harness, 5)

    assert refreshed(instance).result == "ok"


def test_poison_task__a_limit_of_one_fails_it_once_with_the_class_path(harness, settings, tmp_path):
    """At 1 the engine itself fails the attempt's step (its own limit): one error, named
    by its path, as when the backend's count ends the task."""
    settings.WORKERFLOW_MAX_INTERRUPTED_ATTEMPTS = 1
    result = tasks.dies_always.enqueue(str(tmp_path / "dies"))
    _run_until_settled(harness, 3)
    result.refresh()

    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is WorkerLostError
