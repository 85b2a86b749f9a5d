"""Waiting for an instance's result, or for its progress, from outside a workflow.

``wait_result`` and ``wait_progress`` never hold a transaction or a lock while they wait:
they read the row in autocommit between waits. On PostgreSQL they LISTEN on the instance's
channels (the finishing transaction NOTIFYs its finish, :mod:`django_workerflow.runtime.finishing`;
a progress write its progress, :mod:`django_workerflow.store.progress`); elsewhere they poll with a
short backoff. Under the test :class:`~django_workerflow.testing.Harness` they drain instead of
waiting.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connection

from django_workerflow.engine.failures import failure
from django_workerflow.exceptions import WorkflowInputError, WorkflowStateError
from django_workerflow.models import WorkflowInstance
from django_workerflow.store import instance_rows, notifications
from django_workerflow.store import progress as progress_rows
from django_workerflow.store.outcomes import read_outcome
from django_workerflow.values import jsonvalue
from django_workerflow.values.outcome import Outcome
from django_workerflow.values.progress import Progress
from django_workerflow.values.sealing import open_value
from django_workerflow.values.states import TERMINAL_STATUSES

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
    outcome = _wait([channel(pk)], lambda: _read(pk, key), _finished, deadline)
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


_Read = TypeVar("_Read")


def _finished(outcome: Outcome) -> bool:
    return outcome.finished


def _wait(
    channels: list[str],
    read: Callable[[], _Read],
    done: Callable[[_Read], bool],
    deadline: float | None,
) -> _Read:
    """``read()`` until ``done`` says so or ``deadline`` passes; the last read."""
    if notifications.available():
        return _listen(channels, read, done, deadline)
    return _poll(read, done, deadline)


def _listen(
    channels: list[str],
    read: Callable[[], _Read],
    done: Callable[[_Read], bool],
    deadline: float | None,
) -> _Read:
    with notifications.listening(channels):
        while True:
            # Read after LISTEN: a change committed before it is seen here, one after it
            # is notified.
            found = read()
            if done(found) or _expired(deadline):
                return found
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            notifications.wait(1.0 if remaining is None else min(remaining, 1.0))


def _poll(
    read: Callable[[], _Read], done: Callable[[_Read], bool], deadline: float | None
) -> _Read:
    pause = POLL_FIRST
    while True:
        found = read()
        if done(found) or _expired(deadline):
            return found
        time.sleep(_pause(pause, deadline))
        pause = min(pause * POLL_FACTOR, POLL_MAX)


def _result(outcome: Outcome, key: str, timeout: float | timedelta | None) -> Any:
    if not outcome.finished:
        raise TimeoutError(
            f"Instance '{key}' has not finished within {timeout} (status '{outcome.status}')."
        )
    if outcome.ok:
        return open_value(outcome.result)
    raise failure(outcome.as_json(), child=False)


def _read(pk: int, key: str) -> Outcome:
    outcome = read_outcome(pk)
    if outcome is None:
        raise WorkflowStateError(f"Instance '{key}' was deleted while it was awaited.")
    return outcome


def _identify(instance: WorkflowInstance | str) -> tuple[int, str]:
    """The instance's primary key and key (as :func:`~django_workerflow.store.instance_rows.pk_of`
    reads them)."""
    pk = instance_rows.pk_of(instance)
    return pk, instance.key if isinstance(instance, WorkflowInstance) else instance


def _seconds(timeout: float | timedelta | None, verb: str = "wait_result") -> float | None:
    if timeout is None:
        return None
    return jsonvalue.to_timedelta(timeout, what=f"The {verb} timeout").total_seconds()


def _expired(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _pause(pause: float, deadline: float | None) -> float:
    if deadline is None:
        return pause
    return max(min(pause, deadline - time.monotonic()), 0.0)


# Progress -------------------------------------------------------------------------------

_Seen = tuple[str, Progress | None]


def wait_progress(
    instance: WorkflowInstance | str,
    *,
    after: Progress | None = None,
    timeout: float | timedelta | None = None,
) -> Progress:
    """Block until the instance's progress is newer than ``after``; return it, or raise as
    documented on :func:`django_workerflow.wait_progress`."""
    pk, key = _identify(instance)
    seconds = _seconds(timeout, "wait_progress")
    _check_after(after)
    drain = getattr(_harness, "drain", None)
    if drain is not None:
        drain()
        return _progress(_read_progress(pk, key), key, after, timeout)
    seen = _read_progress(pk, key)
    if _progress_done(seen, after):
        return _progress(seen, key, after, timeout)
    if connection.in_atomic_block:
        raise WorkflowStateError(
            f"wait_progress() for instance '{key}' was called inside a transaction, where it "
            "would never see a newer progress. Call it outside transaction.atomic()."
        )
    deadline = None if seconds is None else time.monotonic() + seconds
    seen = _wait(
        [progress_rows.channel(pk), channel(pk)],
        lambda: _read_progress(pk, key),
        lambda found: _progress_done(found, after),
        deadline,
    )
    return _progress(seen, key, after, timeout)


async def await_progress(
    instance: WorkflowInstance | str,
    *,
    after: Progress | None = None,
    timeout: float | timedelta | None = None,
) -> Progress:
    """``wait_progress`` for async code: each read is a short call in a thread, the waiting
    ``asyncio.sleep`` (see :func:`await_result`)."""
    pk, key = await sync_to_async(_identify)(instance)
    seconds = _seconds(timeout, "wait_progress")
    _check_after(after)
    if await sync_to_async(_under_harness)():
        return await sync_to_async(wait_progress)(instance, after=after, timeout=timeout)
    deadline = None if seconds is None else time.monotonic() + seconds
    pause = POLL_FIRST
    while True:
        seen = await sync_to_async(_read_progress)(pk, key)
        if _progress_done(seen, after) or _expired(deadline):
            return _progress(seen, key, after, timeout)
        await asyncio.sleep(_pause(pause, deadline))
        pause = min(pause * POLL_FACTOR, POLL_MAX)


def _check_after(after: object) -> None:
    if after is not None and not isinstance(after, Progress):
        raise WorkflowInputError(
            "after must be None or a Progress an earlier wait_progress() returned, not "
            f"{type(after).__name__}."
        )


def _read_progress(pk: int, key: str) -> _Seen:
    seen = progress_rows.read(pk)
    if seen is None:
        raise WorkflowStateError(f"Instance '{key}' was deleted while its progress was awaited.")
    return seen


def _newer(found: Progress | None, after: Progress | None) -> bool:
    """The row holds only the last value, so any other value than ``after`` is newer."""
    return found is not None and found != after


def _progress_done(seen: _Seen, after: Progress | None) -> bool:
    """A newer value came, or none can come (the instance finished)."""
    status, found = seen
    return _newer(found, after) or status in TERMINAL_STATUSES


def _progress(
    seen: _Seen, key: str, after: Progress | None, timeout: float | timedelta | None
) -> Progress:
    status, found = seen
    if found is not None and _newer(found, after):
        return found
    if status in TERMINAL_STATUSES:
        raise TimeoutError(
            f"Instance '{key}' finished (status '{status}') without a progress newer than the "
            "one given; none can come."
        )
    raise TimeoutError(
        f"Instance '{key}' reported no newer progress within {timeout} (status '{status}')."
    )
