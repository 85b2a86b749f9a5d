"""A run step's ``timeout`` (or its definition's ``step_timeout``) interrupts an attempt that
runs longer, in real time, inside the process that runs it: the attempt is recorded as failed
with StepTimeoutError and retried under the step's own retry policy. The harness runs ticks
in the test's (main) thread, so these tests use the signal timer a django-q2 worker uses."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow import (
    MaxAttemptsExceededError,
    StepTimeoutError,
    WorkflowDefinition,
    WorkflowDefinitionError,
    WorkflowInputError,
    registry,
)
from django_workerflow.engine.step_timer import run_limited
from django_workerflow.models import WorkflowStatus
from django_workerflow.testing import Harness
from tests.support.instances import attempt_failures, refreshed, step

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_timer_left_armed")]

_names = itertools.count()
NO_BACKOFF = {"backoff": lambda attempt: 0.0}


@pytest.fixture
def declare() -> Iterator[Callable[..., type[WorkflowDefinition]]]:
    """``declare(execute, **attributes)``: a registered definition, unregistered afterwards."""
    created: list[type[WorkflowDefinition]] = []

    def make(execute: Callable[[Any], Any], **attributes: Any) -> type[WorkflowDefinition]:
        attrs = {
            "name": f"step-timeout-{next(_names)}",
            "execute": execute,
            "__module__": __name__,
            **attributes,
        }
        definition = type("TimedWorkflow", (WorkflowDefinition,), attrs)
        created.append(definition)
        return definition

    yield make
    for definition in created:
        registry.unregister(definition)


def busy_loop() -> None:
    while True:
        pass


def run_once(harness: Harness, definition: type[WorkflowDefinition]) -> Any:
    instance = workerflow.start(definition, input=None)
    harness.drain()
    return refreshed(instance)


def last_failure(instance: Any, step_id: str) -> Any:
    return (
        instance.step_events.filter(step__step_id=step_id, type="attempt_failed")
        .order_by("pk")
        .last()
    )


@pytest.mark.parametrize(
    "callback",
    [
        pytest.param(lambda: time.sleep(30), id="sleep"),
        pytest.param(busy_loop, id="busy-loop"),
    ],
)
def test_run__a_callback_over_its_timeout_is_interrupted_and_each_attempt_fails(
    harness, declare, callback
):
    definition = declare(
        lambda self: self.run("slow", callback, timeout=0.2, max_attempts=2, **NO_BACKOFF)
    )
    began = time.monotonic()
    instance = run_once(harness, definition)
    took = time.monotonic() - began

    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_name == MaxAttemptsExceededError.__name__
    assert attempt_failures(instance, "slow") == 2
    failed = last_failure(instance, "slow")
    assert failed.error_name == StepTimeoutError.__name__
    assert "timeout of 0.2 s and was interrupted" in failed.error_message
    assert took < 5, f"two attempts of 0.2 s took {took:.2f} s"


def test_run__a_socket_read_that_never_gets_data_is_interrupted(harness, declare):
    reader, writer = socket.socketpair()

    def read() -> str:
        return reader.recv(1).decode()

    definition = declare(lambda self: self.run("read", read, timeout=0.2, max_attempts=1))
    try:
        instance = run_once(harness, definition)
    finally:
        reader.close()
        writer.close()

    assert instance.status == WorkflowStatus.FAILED
    assert last_failure(instance, "read").error_name == StepTimeoutError.__name__


def test_run__a_callback_that_catches_the_interruption_still_fails_its_attempt(harness, declare):
    def swallows() -> str:
        try:
            time.sleep(30)
        except Exception:
            return "carried on"
        return "slept"

    definition = declare(lambda self: self.run("slow", swallows, timeout=0.2, max_attempts=1))
    instance = run_once(harness, definition)

    assert instance.status == WorkflowStatus.FAILED
    failed = last_failure(instance, "slow")
    assert failed.error_name == StepTimeoutError.__name__
    assert "found over time when it returned" in failed.error_message


def test_run__a_c_call_is_failed_when_it_returns_late(harness, declare):
    # os.system waits for its child in C, retrying when the signal interrupts the wait.
    definition = declare(
        lambda self: self.run("shell", lambda: os.system("sleep 0.6"), timeout=0.2, max_attempts=1)
    )
    began = time.monotonic()
    instance = run_once(harness, definition)
    took = time.monotonic() - began

    assert instance.status == WorkflowStatus.FAILED
    assert last_failure(instance, "shell").error_name == StepTimeoutError.__name__
    assert took >= 0.6  # not interrupted: the call ran to its end


def test_run__a_timed_out_attempt_is_retried_and_a_later_one_succeeds(harness, declare):
    calls: list[int] = []

    def slow_then_fast() -> str:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(30)
        return "done"

    definition = declare(
        lambda self: self.run("fetch", slow_then_fast, timeout=0.2, max_attempts=3, **NO_BACKOFF)
    )
    instance = run_once(harness, definition)

    assert instance.status == WorkflowStatus.COMPLETED
    assert instance.result == "done"
    assert len(calls) == 2
    assert attempt_failures(instance, "fetch") == 1
    assert step(instance, "fetch").attempt_count == 2


def test_run__a_step_within_its_timeout_returns_its_result(harness, declare):
    definition = declare(lambda self: self.run("quick", lambda: 7, timeout=timedelta(seconds=5)))
    instance = run_once(harness, definition)

    assert instance.status == WorkflowStatus.COMPLETED
    assert instance.result == 7


def test_step_timeout__is_the_default_of_every_run_step(harness, declare):
    definition = declare(
        lambda self: self.run("slow", lambda: time.sleep(30), max_attempts=1),
        step_timeout=timedelta(milliseconds=200),
    )
    instance = run_once(harness, definition)

    assert instance.status == WorkflowStatus.FAILED
    assert last_failure(instance, "slow").error_name == StepTimeoutError.__name__


def test_run__timeout_overrides_the_definition_s_step_timeout(harness, declare):
    definition = declare(
        lambda self: self.run("slow", lambda: time.sleep(0.3) or "ok", timeout=5, max_attempts=1),
        step_timeout=0.1,
    )
    instance = run_once(harness, definition)

    assert instance.status == WorkflowStatus.COMPLETED
    assert instance.result == "ok"


def test_run__an_inner_step_s_shorter_timeout_fires_inside_the_outer_step(harness, declare):
    def execute(self: WorkflowDefinition) -> Any:
        def outer() -> Any:
            try:
                self.run("inner", lambda: time.sleep(30), timeout=0.2, max_attempts=1)
            except MaxAttemptsExceededError:
                # The outer step's own timer is still armed, with what is left of it.
                return signal.getitimer(signal.ITIMER_REAL)[0]
            return None

        return self.run("outer", outer, timeout=20, max_attempts=1)

    instance = run_once(harness, declare(execute))

    assert instance.status == WorkflowStatus.COMPLETED
    assert 15 < instance.result <= 20
    assert last_failure(instance, "inner").error_name == StepTimeoutError.__name__
    assert attempt_failures(instance, "outer") == 0


def test_run__an_outer_step_s_earlier_deadline_wins_over_an_inner_step_s(harness, declare):
    def execute(self: WorkflowDefinition) -> Any:
        def outer() -> Any:
            return self.run("inner", lambda: time.sleep(30), timeout=20, max_attempts=1)

        return self.run("outer", outer, timeout=0.3, max_attempts=1)

    began = time.monotonic()
    instance = run_once(harness, declare(execute))
    took = time.monotonic() - began

    assert instance.status == WorkflowStatus.FAILED
    assert last_failure(instance, "outer").error_name == StepTimeoutError.__name__
    # The outer step's timeout fails the outer attempt; the inner one is not charged with it.
    assert attempt_failures(instance, "inner") == 0
    assert took < 5


def test_run__an_atomic_step_s_writes_roll_back_when_it_times_out(harness, declare):
    def write_then_hang() -> None:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE workerflow_workflowinstance SET input = '\"written\"'")
        time.sleep(30)

    definition = declare(
        lambda self: self.run("write", write_then_hang, timeout=0.2, max_attempts=1, atomic=True)
    )
    instance = run_once(harness, definition)

    assert instance.status == WorkflowStatus.FAILED
    assert last_failure(instance, "write").error_name == StepTimeoutError.__name__
    assert instance.input is None


def test_run__a_replayed_failure_raises_what_the_first_run_raised(harness, declare):
    caught: list[str] = []

    def execute(self: WorkflowDefinition) -> Any:
        try:
            self.run("slow", lambda: time.sleep(30), timeout=0.2, max_attempts=1)
        except MaxAttemptsExceededError as exc:
            caught.append(type(exc.__cause__).__name__ if exc.__cause__ else "-")
        self.sleep("later", 1)
        return "handled"

    instance = workerflow.start(declare(execute), input=None)
    harness.drain()
    harness.advance(2)

    assert refreshed(instance).result == "handled"
    # First pass: chained to the timeout; the replay raises the recorded failure alone.
    assert caught == [StepTimeoutError.__name__, "-"]


@pytest.mark.parametrize(
    ("timeout", "problem"),
    [
        (0, "more than 0 seconds"),
        (-1, "more than 0 seconds"),
        (timedelta(0), "positive timedelta"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        ("5", "is a str"),
        (True, "is a bool"),
    ],
)
def test_run__refuses_a_timeout_that_is_not_a_positive_duration(harness, declare, timeout, problem):
    caught: list[str] = []

    def execute(self: WorkflowDefinition) -> None:
        try:
            self.run("step", lambda: 1, timeout=timeout)
        except WorkflowInputError as exc:
            caught.append(str(exc))

    run_once(harness, declare(execute))

    assert len(caught) == 1
    assert "run step 'step'" in caught[0]
    assert problem in caught[0]


@pytest.mark.parametrize("bad", [0, -2.5, "30", timedelta(seconds=-1), float("nan"), False])
def test_step_timeout__a_bad_value_is_refused_when_the_class_is_declared(bad):
    with pytest.raises(WorkflowDefinitionError, match="`step_timeout`"):

        class Bad(WorkflowDefinition, register=False):
            name = "bad-step-timeout"
            step_timeout = bad

            def execute(self) -> None:
                pass


def test_run_limited__off_the_main_thread_the_overrun_is_found_when_the_callback_returns():
    outcome: list[BaseException | str] = []

    def in_thread() -> None:
        try:
            outcome.append(run_limited(lambda: time.sleep(0.3) or "late", step_id="s", seconds=0.1))
        except StepTimeoutError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()

    assert isinstance(outcome[0], StepTimeoutError)
    assert outcome[0].step_id == "s"
    assert "found over time when it returned after" in str(outcome[0])


def test_run_limited__hands_an_earlier_outer_alarm_to_its_handler():
    fired: list[int] = []

    def outer_handler(signum: int, frame: object) -> None:
        fired.append(signum)
        raise TimeoutError("outer")

    previous = signal.signal(signal.SIGALRM, outer_handler)
    signal.setitimer(signal.ITIMER_REAL, 0.1)
    try:
        with pytest.raises(TimeoutError, match="outer"):
            run_limited(lambda: time.sleep(30), step_id="s", seconds=20)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

    assert fired == [signal.SIGALRM]


def test_run_limited__puts_back_an_outer_alarm_with_what_is_left_of_it():
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: None)
    signal.setitimer(signal.ITIMER_REAL, 30)
    try:
        assert run_limited(lambda: "quick", step_id="s", seconds=5) == "quick"
        left = signal.getitimer(signal.ITIMER_REAL)[0]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

    assert 29 < left <= 30
