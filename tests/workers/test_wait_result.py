"""wait_result, await_result and the async twins, under the harness and in real time."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction

import django_workerflow as workerflow
from django_workerflow import WorkflowCancelledError, WorkflowFailedError, WorkflowStateError
from django_workerflow.models import WorkflowInstance
from django_workerflow.runtime.tick import tick
from django_workerflow.store import instance_rows
from django_workerflow.workers import bells
from tests.support.threads import in_threads


@pytest.fixture
def waiter(define):
    """Completes with the payload of its 'go' event."""

    def execute(self):
        return {"got": self.wait("go", "go")}

    return define(execute, name="test-waiter")


@pytest.fixture
def broken(define):
    def execute(self):
        raise RuntimeError("export failed")

    return define(execute, name="test-broken")


# Under the harness -----------------------------------------------------------------


def test_wait_result__under_the_harness_drains_then_returns(define, workerflow_harness):
    instance = workerflow.start(define(lambda self: self.run("n", lambda: 7)), key="h1")
    assert workerflow.wait_result("h1") == 7
    assert instance.wait_result() == 7
    assert workerflow_harness.ticks == 1


def test_wait_result__under_the_harness_raises_timeout_at_once(waiter, workerflow_harness):
    instance = workerflow.start(waiter, key="h2")
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="'h2' has not finished"):
        workerflow.wait_result(instance, timeout=3600)
    assert time.monotonic() - began < 1
    workerflow.send_event(instance, "go", 1)
    assert instance.wait_result(timeout=0) == {"got": 1}


def test_wait_result__raises_workflow_failed_error(broken, workerflow_harness):
    workerflow.start(broken, key="export-1")
    with pytest.raises(WorkflowFailedError) as caught:
        workerflow.wait_result("export-1")
    assert not isinstance(caught.value, WorkflowCancelledError)
    assert str(caught.value) == "Instance 'export-1' failed: RuntimeError: export failed"
    assert (caught.value.key, caught.value.status, caught.value.error_name) == (
        "export-1",
        "failed",
        "RuntimeError",
    )


def test_wait_result__raises_workflow_cancelled_error(waiter, workerflow_harness):
    instance = workerflow.start(waiter, key="c1")
    workerflow.cancel(instance, reason="no longer needed")
    with pytest.raises(WorkflowCancelledError) as caught:
        instance.wait_result()
    assert caught.value.reason == "no longer needed"
    assert caught.value.status == "cancelled"


def test_wait_result__refuses_bad_timeouts(waiter, workerflow_harness):
    instance = workerflow.start(waiter)
    with pytest.raises(workerflow.WorkflowInputError):
        instance.wait_result(timeout=-1)
    with pytest.raises(workerflow.WorkflowInputError):
        instance.wait_result(timeout="soon")


def test_await_result__under_the_harness_drains_then_returns(define, workerflow_harness):
    # As in Django's async tests: async_to_sync runs the coroutine in a thread of its own.
    instance = workerflow.start(define(lambda self: self.run("n", lambda: 7)), key="ah1")
    assert async_to_sync(instance.await_result)(timeout=5) == 7
    assert async_to_sync(instance.await_result)(timeout=None) == 7
    assert workerflow_harness.ticks == 1


def test_await_result__under_the_harness_raises_timeout_after_draining(waiter, workerflow_harness):
    instance = workerflow.start(waiter, key="ah2")
    with pytest.raises(TimeoutError, match="'ah2' has not finished"):
        async_to_sync(instance.await_result)(timeout=2)
    # It drained (the instance ran to its wait) instead of waiting in real time.
    assert workerflow_harness.ticks == 1
    workerflow.send_event(instance, "go", 1)
    assert async_to_sync(instance.await_result)(timeout=0) == {"got": 1}


# In real time (no harness): another thread finishes the instance -------------------


def _finish_later(key: str, delay: float) -> None:
    time.sleep(delay)
    workerflow.send_event(key, "go", "late")
    tick(instance_rows.pk_of(key))


def test_wait_result__returns_when_another_worker_finishes(transactional_db, waiter):
    with bells.suppressed():
        instance = workerflow.start(waiter, key="rt-1")
        tick(instance.pk)

    def wait() -> tuple[object, float]:
        began = time.monotonic()
        value = workerflow.wait_result("rt-1", timeout=30)
        return value, time.monotonic() - began

    (value, waited), _ = in_threads(wait, lambda: _finish_later("rt-1", 0.3))
    assert value == {"got": "late"}
    assert 0.25 < waited < 5


def test_wait_result__times_out_with_a_timedelta(transactional_db, waiter):
    with bells.suppressed():
        instance = workerflow.start(waiter, key="rt-2")
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        instance.wait_result(timeout=timedelta(milliseconds=200))
    assert 0.15 < time.monotonic() - began < 2


def test_wait_result__refuses_to_wait_inside_a_transaction(transactional_db, waiter):
    with bells.suppressed():
        instance = workerflow.start(waiter, key="rt-3")
    with transaction.atomic(), pytest.raises(WorkflowStateError, match="inside a transaction"):
        instance.wait_result(timeout=1)


# Async twins -----------------------------------------------------------------------


def test_async_twins__start_send_and_await(transactional_db, waiter):
    async def scenario() -> object:
        await _close_thread_connection()  # as a request's start: not an earlier test's
        instance = await workerflow.astart(waiter, key="async-1")
        finisher = asyncio.get_running_loop().run_in_executor(
            None, _tick_after_event_in_thread, "async-1"
        )
        await workerflow.asend_event("async-1", "go", "from async")
        value = await instance.await_result(timeout=30)
        await finisher
        await _close_thread_connection()
        return value

    # A fresh thread, as an ASGI server's: the test thread's connection stays its own.
    [value] = in_threads(lambda: asyncio.run(scenario()))
    assert value == {"got": "from async"}


def _tick_after_event_in_thread(key: str) -> None:
    from django.db import connection

    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with bells.suppressed():
                tick(instance_rows.pk_of(key))
            if WorkflowInstance.objects.get(key=key).is_terminal:
                return
            time.sleep(0.05)
    finally:
        connection.close()


def test_await_result__times_out(transactional_db, waiter):
    with bells.suppressed():
        instance = workerflow.start(waiter, key="async-2")

    async def scenario() -> None:
        await _close_thread_connection()  # as a request's start: not an earlier test's
        try:
            await instance.await_result(timeout=0.2)
        finally:
            await _close_thread_connection()

    with pytest.raises(TimeoutError):
        in_threads(lambda: asyncio.run(scenario()))


async def _close_thread_connection() -> None:
    """Close the connection of sync_to_async's thread, as a site does at a request's start
    and end. That thread outlives a test: its connection may be one an earlier test left
    open, since cut by a restart of the server (tests/reliability/faults)."""
    from asgiref.sync import sync_to_async
    from django.db import connection

    def close() -> None:  # resolves the connection in sync_to_async's thread
        connection.close()

    await sync_to_async(close)()
