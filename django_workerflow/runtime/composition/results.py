"""Waiting for an instance's result from outside a workflow.

``wait_result`` never holds a transaction or a lock while it waits: it reads the status in
autocommit between waits. On PostgreSQL it LISTENs on the instance's channel (the finishing
transaction NOTIFYs it, :mod:`.finishing`); elsewhere it polls with a short backoff. Under
the test :class:`~django_workerflow.testing.Harness` it drains instead of waiting.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection

from django_workerflow.engine.failures import failure
from django_workerflow.exceptions import WorkflowStateError
from django_workerflow.models import WorkflowInstance
from django_workerflow.store import instance_rows
from django_workerflow.store.outcomes import Outcome, read_outcome
from django_workerflow.values import jsonvalue

# Polling backoff (SQLite and others, and async waits): first pause, growth, longest pause.
POLL_FIRST = 0.005
POLL_FACTOR = 1.5
POLL_MAX = 0.05

_harness = threading.local()


def channel(instance_pk: int) -> str:
    """The PostgreSQL NOTIFY channel of an instance's finish."""
    return f"workerflow_finished_{instance_pk}"


def set_drainer(drain: Callable[[], Any] | None) -> None:
    """Install (or remove, with None) the harness's drain: waits then drain, never sleep."""
    _harness.drain = drain


def _under_harness() -> bool:
    """True when a harness is open in this thread (its drainer is thread-local)."""
    return getattr(_harness, "drain", None) is not None


def wait_result(instance: WorkflowInstance | str, timeout: float | timedelta | None = None) -> Any:
    """Block until the instance finishes; return its result or raise as documented on
    :func:`django_workerflow.wait_result`."""
    pk, key = _identify(instance)
    seconds = _seconds(timeout)
    drain = getattr(_harness, "drain", None)
    if drain is not None:
        drain()
        return _result(_read(pk, key), key, timeout)
    outcome = _read(pk, key)
    if outcome.finished:
        return _result(outcome, key, timeout)
    if connection.in_atomic_block:
        raise WorkflowStateError(
            f"wait_result() for instance '{key}' was called inside a transaction, where it "
            "would never see the instance finish. Call it outside transaction.atomic()."
        )
    deadline = None if seconds is None else time.monotonic() + seconds
    if connection.vendor == "postgresql" and hasattr(connection.connection, "notifies"):
        outcome = _listen(pk, key, deadline)
    else:
        outcome = _poll(pk, key, deadline)
    return _result(outcome, key, timeout)


async def await_result(
    instance: WorkflowInstance | str, timeout: float | timedelta | None = None
) -> Any:
    """``wait_result`` for async code: each status read is a short call in a thread; the
    waiting itself is ``asyncio.sleep``, so no thread is held for the whole wait.

    The event loop may run in another thread than the code that opened a harness (Django's
    async tests run it under ``async_to_sync``), so whether one is open is asked where the
    sync calls run, the harness's thread: then ``wait_result`` drains there.
    """
    pk, key = await sync_to_async(_identify)(instance)
    seconds = _seconds(timeout)
    if await sync_to_async(_under_harness)():
        return await sync_to_async(wait_result)(instance, timeout)
    deadline = None if seconds is None else time.monotonic() + seconds
    pause = POLL_FIRST
    while True:
        outcome = await sync_to_async(_read)(pk, key)
        if outcome.finished or _expired(deadline):
            return _result(outcome, key, timeout)
        await asyncio.sleep(_pause(pause, deadline))
        pause = min(pause * POLL_FACTOR, POLL_MAX)


def _listen(pk: int, key: str, deadline: float | None) -> Outcome:
    name = channel(pk)
    with connection.cursor() as cursor:
        cursor.execute(f'LISTEN "{name}"')
    try:
        while True:
            # Read after LISTEN: a finish committed before it is seen here, one after it
            # is notified.
            outcome = _read(pk, key)
            if outcome.finished or _expired(deadline):
                return outcome
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            wait = 1.0 if remaining is None else min(remaining, 1.0)
            for _ in connection.connection.notifies(timeout=wait, stop_after=1):
                break
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'UNLISTEN "{name}"')


def _poll(pk: int, key: str, deadline: float | None) -> Outcome:
    pause = POLL_FIRST
    while True:
        outcome = _read(pk, key)
        if outcome.finished or _expired(deadline):
            return outcome
        time.sleep(_pause(pause, deadline))
        pause = min(pause * POLL_FACTOR, POLL_MAX)


def _result(outcome: Outcome, key: str, timeout: float | timedelta | None) -> Any:
    if not outcome.finished:
        raise TimeoutError(
            f"Workflow '{key}' has not finished within {timeout} (status '{outcome.status}')."
        )
    if outcome.ok:
        return outcome.result
    raise failure(outcome.as_json(), child=False)


def _read(pk: int, key: str) -> Outcome:
    outcome = read_outcome(pk)
    if outcome is None:
        raise WorkflowStateError(f"Instance '{key}' was deleted while it was awaited.")
    return outcome


def _identify(instance: WorkflowInstance | str) -> tuple[int, str]:
    """The instance's primary key and key (as :func:`~.instance_rows.pk_of` reads them)."""
    pk = instance_rows.pk_of(instance)
    return pk, instance.key if isinstance(instance, WorkflowInstance) else instance


def _seconds(timeout: float | timedelta | None) -> float | None:
    if timeout is None:
        return None
    return jsonvalue.to_timedelta(timeout, what="The wait_result timeout").total_seconds()


def _expired(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _pause(pause: float, deadline: float | None) -> float:
    if deadline is None:
        return pause
    return max(min(pause, deadline - time.monotonic()), 0.0)
