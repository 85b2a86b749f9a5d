"""Durable workflows for Django: replayed definitions, steps recorded in your database.

The facade: the verbs, the errors, ``WorkflowDefinition`` and the values the verbs return.
Every verb has an async twin named as Django names them (``start`` and ``astart``,
``pause`` and ``apause``, ``wait_result`` and ``await_result``), with the same parameters,
returns and errors. Which verbs answer with a bool and which raise is one rule, stated in
docs/concepts.md#what-the-verbs-answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.exceptions import (
    DatabaseUnavailableError,
    DuplicateStepIdError,
    MaxAttemptsExceededError,
    NondeterminismError,
    NonRetryableStepError,
    ReplayError,
    StepOutcomeError,
    StepTimeoutError,
    WaitStepTimedOutError,
    WorkerflowError,
    WorkerLostError,
    WorkflowCancelledError,
    WorkflowDefinitionError,
    WorkflowFailedError,
    WorkflowInputError,
    WorkflowNotRegisteredError,
    WorkflowStateError,
    WorkflowTimeoutError,
    WorkflowVersionConflictError,
)
from django_workerflow.values.outcome import Outcome
from django_workerflow.values.progress import Progress
from django_workerflow.values.replay_verdict import ReplayVerdict
from django_workerflow.values.settled import SettledResult

if TYPE_CHECKING:
    from django_workerflow.models import InboundEvent, WorkflowInstance

__all__ = [
    "DatabaseUnavailableError",
    "DuplicateStepIdError",
    "MaxAttemptsExceededError",
    "NonRetryableStepError",
    "NondeterminismError",
    "Outcome",
    "Progress",
    "ReplayError",
    "ReplayVerdict",
    "SettledResult",
    "StepOutcomeError",
    "StepTimeoutError",
    "WaitStepTimedOutError",
    "WorkerLostError",
    "WorkerflowError",
    "WorkflowCancelledError",
    "WorkflowDefinition",
    "WorkflowDefinitionError",
    "WorkflowFailedError",
    "WorkflowInputError",
    "WorkflowNotRegisteredError",
    "WorkflowStateError",
    "WorkflowTimeoutError",
    "WorkflowVersionConflictError",
    "acancel",
    "afailed_children",
    "afork",
    "ais_definition_paused",
    "apause",
    "apause_definition",
    "areplay_verdict",
    "aresume",
    "aresume_definition",
    "aretry",
    "asend_event",
    "astart",
    "astart_many",
    "await_progress",
    "await_result",
    "cancel",
    "failed_children",
    "fork",
    "is_definition_paused",
    "pause",
    "pause_definition",
    "replay_verdict",
    "resume",
    "resume_definition",
    "retry",
    "send_event",
    "start",
    "start_many",
    "wait_progress",
    "wait_result",
]


# The runtime needs Django's app registry, which is not ready when this package is
# imported (INSTALLED_APPS names it), so each verb imports the runtime when called.


def start(
    definition: str | type[WorkflowDefinition],
    *,
    key: str | None = None,
    input: Any = None,
    version: str | None = None,
    priority: int = 0,
    debounce: float | timedelta | None = None,
    max_debounce: float | timedelta | None = None,
    timeout: float | timedelta | None = None,
    attributes: Mapping[str, str | int | float | bool | None] | None = None,
) -> WorkflowInstance:
    """Start a workflow and return its instance; idempotent on ``key``.

    The first start under a key pins the input and the version; a later one returns that
    instance. ``priority`` orders the queue of a workflow with a concurrency or rate limit
    (lower first).

    With ``debounce`` (seconds or a timedelta; default: the definition's), the first tick
    comes that long after the start, and a later start under the same key, while the
    instance has not started its first step, replaces its input and puts the first tick
    off again, to at most ``max_debounce`` after the first start; it returns the same
    instance. Once the instance has started, the start returns it as any start does.

    ``timeout`` (seconds or a timedelta; default: the definition's ``timeout``) is how long
    the new instance may run, from its first tick, paused time not counted: one not
    finished by then fails with :class:`WorkflowTimeoutError`. An existing instance keeps
    its own.

    ``attributes`` (``{"customer": "c-42"}``) are the new instance's searchable attributes,
    as ``self.set_attributes()`` sets them (an existing instance keeps its own); a bad one
    raises :class:`WorkflowInputError` before anything is written.

    Raises :class:`WorkflowNotRegisteredError` for an unknown definition or version,
    :class:`WorkflowVersionConflictError` for another ``version`` of an unfinished
    instance, and :class:`WorkflowInputError` for input that is not JSON, a bad key or
    priority, a key that belongs to another workflow, a debounce or timeout that is not a
    positive duration, or a debounced start without a key or of a workflow with flow
    control.
    """
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime import starting

    return starting.start(
        definition,
        key=key,
        input=input,
        version=version,
        priority=priority,
        debounce=debounce,
        max_debounce=max_debounce,
        timeout=timeout,
        attributes=attributes,
    )


def start_many(
    definition: str | type[WorkflowDefinition],
    items: Iterable[tuple[str | None, Any]],
    *,
    version: str | None = None,
    timeout: float | timedelta | None = None,
    attributes: Mapping[str, str | int | float | bool | None] | None = None,
) -> list[WorkflowInstance]:
    """Start one instance per ``(key, input)`` pair and return them in order, idempotent by
    key like :func:`start`. Every item is validated before any write (one bad item raises
    :class:`WorkflowInputError` and writes nothing); rows are written 1,000 per statement.
    ``timeout`` (default: the definition's) and ``attributes`` are each new instance's, as
    :func:`start`'s."""
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime.bulk_start import start_many as start_many_

    return start_many_(definition, items, version=version, timeout=timeout, attributes=attributes)


def send_event(
    instance: WorkflowInstance | str,
    event_name: str,
    payload: Any = None,
    *,
    missing_ok: bool = False,
    idempotency_key: str | None = None,
) -> InboundEvent | None:
    """Send an event to an instance (a key or the instance) and return the stored event.

    Returns None if the instance has finished, or if the key is unknown and ``missing_ok``
    (for signal handlers). Raises ``WorkflowInstance.DoesNotExist`` for an unknown key, and
    :class:`WorkflowInputError` for a bad event name, idempotency key or a payload that is
    not JSON.

    With ``idempotency_key`` (up to 200 characters), a second send with the same key to the
    same instance stores nothing and returns the event the first one stored: retry with the
    same key after any error (a database error during the commit included).
    """
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime import events

    return events.send_event(
        instance, event_name, payload, missing_ok=missing_ok, idempotency_key=idempotency_key
    )


def pause(instance: WorkflowInstance | str) -> bool:
    """Pause a running instance at its next step boundary. Returns False if it was not
    running (nothing changed); raises ``WorkflowInstance.DoesNotExist`` for an unknown key."""
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime import control

    return control.pause(instance)


def resume(instance: WorkflowInstance | str) -> None:
    """Resume a paused instance at once; returns None. Raises :class:`WorkflowStateError`
    if it is not paused, ``WorkflowInstance.DoesNotExist`` for an unknown key."""
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime import control

    control.resume(instance)


def pause_definition(name: str, *, reason: str, actor: str | None = None) -> bool:
    """Pause every instance of the definition ``name``, in every cluster, until
    :func:`resume_definition`: no attempt starts (a running one stops at its next step
    boundary); starts, events and schedules are kept. ``reason`` is required and recorded
    with ``actor`` and the time. Returns False if it was paused already (nothing changed).
    Raises :class:`WorkflowNotRegisteredError` for an unknown name and
    :class:`WorkflowInputError` for an empty reason."""
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime import definition_pauses

    return definition_pauses.pause_definition(name, reason=reason, actor=actor)


def resume_definition(name: str, *, reason: str = "", actor: str | None = None) -> bool:
    """Let the instances of the paused definition ``name`` go on, the due ones earliest
    first, under its limits; recorded with ``actor``, the time and ``reason`` (optional).
    Returns False if it was not paused. Raises :class:`WorkflowNotRegisteredError` for a
    name that is neither registered nor paused."""
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime import definition_pauses

    return definition_pauses.resume_definition(name, reason=reason, actor=actor)


def is_definition_paused(name: str) -> bool:
    """Return whether the definition ``name`` is paused now: False for a name never paused,
    registered or not, so it raises nothing for an unknown name (a read, not a verb that
    acts)."""
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime import definition_pauses

    return definition_pauses.is_definition_paused(name)


def cancel(instance: WorkflowInstance | str, reason: str | None = None) -> bool:
    """Cancel an unfinished instance and its unfinished children; no step starts after
    this. Returns False if it had already finished; raises :class:`WorkflowInputError` for a
    reason that is not storable text, ``WorkflowInstance.DoesNotExist`` for an unknown key."""
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime import control

    return control.cancel(instance, reason=reason)


def retry(
    instance: WorkflowInstance | str,
    reason: str | None = None,
    *,
    with_children: bool = False,
) -> None:
    """Run a failed instance again from the step that failed it, with the code now
    deployed; ``with_children`` also retries the failed children it waits for. Returns
    None. Raises :class:`WorkflowStateError` unless it is failed, and
    :class:`WorkflowInputError` for a reason that is not storable text."""
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime import reruns

    reruns.retry(instance, reason=reason, with_children=with_children)


def failed_children(instance: WorkflowInstance | str) -> list[WorkflowInstance]:
    """Return the failed (or cancelled) instances a retry of this failed one would meet
    again: what ``retry(..., with_children=True)`` retries with it (the cancelled ones it
    cannot). Raises ``WorkflowInstance.DoesNotExist`` for an unknown key."""
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime import reruns

    return reruns.failed_children(instance)


def fork(
    instance: WorkflowInstance | str,
    *,
    from_step: str | None = None,
    key: str | None = None,
    version: str | None = None,
    input: Any = ...,
    reason: str | None = None,
) -> WorkflowInstance:
    """Fork an instance from a step onto a version (default: the registered default) and
    return the new instance, which keeps the source's settled steps before ``from_step``.
    Raises :class:`WorkflowInputError` for an unknown step, a taken key or bad input, and
    :class:`WorkflowNotRegisteredError` for an unknown version."""
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime import reruns

    return reruns.fork(
        instance, from_step=from_step, key=key, version=version, input=input, reason=reason
    )


def replay_verdict(instance: WorkflowInstance | str) -> ReplayVerdict:
    """Judge now whether the code this process has registered can replay the instance's
    history, as ``manage.py workerflow check-replay`` does, and return a frozen verdict:
    ``.ok`` (bool) and ``.reason`` (check-replay's messages; empty when ok). Writes nothing.
    A failed instance is judged as ``check-replay --include-failed`` does (a retry replays
    it); a completed or cancelled one has nothing left to replay and is ok. Raises
    ``WorkflowInstance.DoesNotExist`` for an unknown key."""
    # Late: the replay check needs the app registry (see the note above start()).
    from django_workerflow.deploy import verdicts

    return verdicts.replay_verdict(instance)


def wait_result(instance: WorkflowInstance | str, timeout: float | timedelta | None = None) -> Any:
    """Block until the instance finishes and return its result.

    Raises :class:`WorkflowFailedError` (:class:`WorkflowCancelledError` if cancelled), or
    the builtin ``TimeoutError`` once ``timeout`` (seconds or a timedelta) passes. Holds no
    transaction or lock while waiting; under the test ``Harness`` it drains instead.
    """
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime.composition import results

    return results.wait_result(instance, timeout)


def wait_progress(
    instance: WorkflowInstance | str,
    *,
    after: Progress | None = None,
    timeout: float | timedelta | None = None,
) -> Progress:
    """Return the instance's progress once it is newer than ``after`` (a value an earlier
    call returned; None: the current one, at once if there is one).

    Raises the builtin ``TimeoutError`` once ``timeout`` (seconds or a timedelta; None:
    no limit) passes without a newer value, and at once if the instance has finished
    without one (none can come); for an unknown key what :func:`wait_result` raises
    (``WorkflowInstance.DoesNotExist``; :class:`WorkflowInputError` for a key that is not
    storable text, or an ``after`` that is not a Progress), and
    :class:`WorkflowStateError` if it is deleted while awaited or if called inside a
    transaction. Holds no transaction or lock while waiting
    (PostgreSQL: LISTEN/NOTIFY; elsewhere short polls); under the test ``Harness`` it
    drains, then returns or raises at once.
    """
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime.composition import results

    return results.wait_progress(instance, after=after, timeout=timeout)


async def astart(
    definition: str | type[WorkflowDefinition],
    *,
    key: str | None = None,
    input: Any = None,
    version: str | None = None,
    priority: int = 0,
    debounce: float | timedelta | None = None,
    max_debounce: float | timedelta | None = None,
    timeout: float | timedelta | None = None,
    attributes: Mapping[str, str | int | float | bool | None] | None = None,
) -> WorkflowInstance:
    """:func:`start` for async code: the same parameters, returns and errors."""
    return await sync_to_async(start)(
        definition,
        key=key,
        input=input,
        version=version,
        priority=priority,
        debounce=debounce,
        max_debounce=max_debounce,
        timeout=timeout,
        attributes=attributes,
    )


async def astart_many(
    definition: str | type[WorkflowDefinition],
    items: Iterable[tuple[str | None, Any]],
    *,
    version: str | None = None,
    timeout: float | timedelta | None = None,
    attributes: Mapping[str, str | int | float | bool | None] | None = None,
) -> list[WorkflowInstance]:
    """:func:`start_many` for async code: the same parameters, returns and errors."""
    return await sync_to_async(start_many)(
        definition, items, version=version, timeout=timeout, attributes=attributes
    )


async def asend_event(
    instance: WorkflowInstance | str,
    event_name: str,
    payload: Any = None,
    *,
    missing_ok: bool = False,
    idempotency_key: str | None = None,
) -> InboundEvent | None:
    """:func:`send_event` for async code: the same parameters, returns and errors."""
    return await sync_to_async(send_event)(
        instance, event_name, payload, missing_ok=missing_ok, idempotency_key=idempotency_key
    )


async def apause(instance: WorkflowInstance | str) -> bool:
    """:func:`pause` for async code: the same parameters, returns and errors."""
    return await sync_to_async(pause)(instance)


async def aresume(instance: WorkflowInstance | str) -> None:
    """:func:`resume` for async code: the same parameters, returns and errors."""
    await sync_to_async(resume)(instance)


async def apause_definition(name: str, *, reason: str, actor: str | None = None) -> bool:
    """:func:`pause_definition` for async code: the same parameters, returns and errors."""
    return await sync_to_async(pause_definition)(name, reason=reason, actor=actor)


async def aresume_definition(name: str, *, reason: str = "", actor: str | None = None) -> bool:
    """:func:`resume_definition` for async code: the same parameters, returns and errors."""
    return await sync_to_async(resume_definition)(name, reason=reason, actor=actor)


async def ais_definition_paused(name: str) -> bool:
    """:func:`is_definition_paused` for async code: the same parameters, returns and
    errors."""
    return await sync_to_async(is_definition_paused)(name)


async def areplay_verdict(instance: WorkflowInstance | str) -> ReplayVerdict:
    """:func:`replay_verdict` for async code: the same parameters, returns and errors."""
    return await sync_to_async(replay_verdict)(instance)


async def acancel(instance: WorkflowInstance | str, reason: str | None = None) -> bool:
    """:func:`cancel` for async code: the same parameters, returns and errors."""
    return await sync_to_async(cancel)(instance, reason)


async def aretry(
    instance: WorkflowInstance | str,
    reason: str | None = None,
    *,
    with_children: bool = False,
) -> None:
    """:func:`retry` for async code: the same parameters, returns and errors."""
    await sync_to_async(retry)(instance, reason, with_children=with_children)


async def afailed_children(instance: WorkflowInstance | str) -> list[WorkflowInstance]:
    """:func:`failed_children` for async code: the same parameters, returns and errors."""
    return await sync_to_async(failed_children)(instance)


async def afork(
    instance: WorkflowInstance | str,
    *,
    from_step: str | None = None,
    key: str | None = None,
    version: str | None = None,
    input: Any = ...,
    reason: str | None = None,
) -> WorkflowInstance:
    """:func:`fork` for async code: the same parameters, returns and errors."""
    return await sync_to_async(fork)(
        instance, from_step=from_step, key=key, version=version, input=input, reason=reason
    )


async def await_result(
    instance: WorkflowInstance | str, timeout: float | timedelta | None = None
) -> Any:
    """:func:`wait_result` for async code, without holding a thread for the whole wait:
    the same parameters, returns and errors."""
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime.composition import results

    return await results.await_result(instance, timeout)


async def await_progress(
    instance: WorkflowInstance | str,
    *,
    after: Progress | None = None,
    timeout: float | timedelta | None = None,
) -> Progress:
    """:func:`wait_progress` for async code, without holding a thread for the whole wait:
    the same parameters, returns and errors."""
    # Late: the runtime needs the app registry (see the note above start()).
    from django_workerflow.runtime.composition import results

    return await results.await_progress(instance, after=after, timeout=timeout)
