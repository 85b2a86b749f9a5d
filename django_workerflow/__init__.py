"""Durable workflows for Django: replayed definitions, steps recorded in your database."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django_workerflow.definition import registry
from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.engine.execution import SettledResult
from django_workerflow.engine.outcomes import Outcome
from django_workerflow.exceptions import (
    DuplicateStepIdError,
    MaxAttemptsExceededError,
    NondeterminismError,
    NonRetryableStepError,
    WaitStepTimedOutError,
    WorkerflowError,
    WorkflowCancelledError,
    WorkflowDefinitionError,
    WorkflowFailedError,
    WorkflowInputError,
    WorkflowNotRegisteredError,
    WorkflowStateError,
    WorkflowVersionConflictError,
)

if TYPE_CHECKING:
    from django_workerflow.models import InboundEvent, WorkflowInstance

__all__ = [
    "DuplicateStepIdError",
    "MaxAttemptsExceededError",
    "NonRetryableStepError",
    "NondeterminismError",
    "Outcome",
    "SettledResult",
    "WaitStepTimedOutError",
    "WorkerflowError",
    "WorkflowCancelledError",
    "WorkflowDefinition",
    "WorkflowDefinitionError",
    "WorkflowFailedError",
    "WorkflowInputError",
    "WorkflowNotRegisteredError",
    "WorkflowStateError",
    "WorkflowVersionConflictError",
    "asend_event",
    "astart",
    "cancel",
    "failed_children",
    "fork",
    "pause",
    "registry",
    "resume",
    "retry",
    "send_event",
    "start",
    "start_many",
    "wait_result",
]


# The runtime imports models, which Django cannot import before the app registry is
# ready, so these functions import it when called.


def start(
    definition: str | type[WorkflowDefinition],
    *,
    key: str | None = None,
    input: Any = None,
    version: str | None = None,
    priority: int = 0,
) -> WorkflowInstance:
    """Start a workflow (idempotent on ``key``) and return its instance; ``priority``
    orders the queue of a workflow with a concurrency or rate limit (lower first)."""
    from django_workerflow.runtime import verbs

    return verbs.start(definition, key=key, input=input, version=version, priority=priority)


def start_many(
    workflow: str | type[WorkflowDefinition],
    items: Iterable[tuple[str | None, Any]],
    *,
    version: str | None = None,
) -> list[WorkflowInstance]:
    """Start one instance per ``(key, input)`` pair, idempotent by key like :func:`start`:
    every item is validated before any write, rows are written 1,000 per statement."""
    from django_workerflow.runtime.bulk_start import start_many as start_many_

    return start_many_(workflow, items, version=version)


def send_event(
    instance: WorkflowInstance | str,
    event_name: str,
    payload: Any = None,
    *,
    missing_ok: bool = False,
) -> InboundEvent | None:
    """Send an event to an instance (by key or object); None if it has finished, or if
    the key is unknown and ``missing_ok``."""
    from django_workerflow.runtime import verbs

    return verbs.send_event(instance, event_name, payload, missing_ok=missing_ok)


def pause(instance: WorkflowInstance | str) -> bool:
    """Pause a running instance at its next step boundary."""
    from django_workerflow.runtime import verbs

    return verbs.pause(instance)


def resume(instance: WorkflowInstance | str) -> None:
    """Resume a paused instance."""
    from django_workerflow.runtime import verbs

    verbs.resume(instance)


def cancel(instance: WorkflowInstance | str, reason: str | None = None) -> bool:
    """Cancel an unfinished instance."""
    from django_workerflow.runtime import verbs

    return verbs.cancel(instance, reason=reason)


def retry(
    key_or_instance: WorkflowInstance | str,
    reason: str | None = None,
    *,
    with_children: bool = False,
) -> None:
    """Run a failed instance again from the step that failed it; ``with_children`` also
    retries the failed children it waits for."""
    from django_workerflow.runtime import reruns

    reruns.retry(key_or_instance, reason=reason, with_children=with_children)


def failed_children(key_or_instance: WorkflowInstance | str) -> list[WorkflowInstance]:
    """The failed (or cancelled) instances a retry of this failed one would meet again:
    what ``retry(..., with_children=True)`` retries with it (the cancelled ones it cannot)."""
    from django_workerflow.runtime import reruns

    return reruns.failed_children(key_or_instance)


def fork(
    key_or_instance: WorkflowInstance | str,
    *,
    from_step: str | None = None,
    key: str | None = None,
    version: str | None = None,
    input: Any = ...,
    reason: str | None = None,
) -> WorkflowInstance:
    """Fork an instance from a step onto a version (default: the registered default)."""
    from django_workerflow.runtime import reruns

    return reruns.fork(
        key_or_instance, from_step=from_step, key=key, version=version, input=input, reason=reason
    )


def wait_result(
    key_or_instance: WorkflowInstance | str, timeout: float | timedelta | None = None
) -> Any:
    """Block until the instance finishes and return its result.

    Raises :class:`WorkflowFailedError` (:class:`WorkflowCancelledError` if cancelled), or
    the builtin ``TimeoutError`` once ``timeout`` (seconds or a timedelta) passes. Holds no
    transaction or lock while waiting; under the test ``Harness`` it drains instead.
    """
    from django_workerflow.runtime.composition import results

    return results.wait_result(key_or_instance, timeout)


async def astart(
    definition: str | type[WorkflowDefinition],
    *,
    key: str | None = None,
    input: Any = None,
    version: str | None = None,
) -> WorkflowInstance:
    """:func:`start` for async code."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(start)(definition, key=key, input=input, version=version)


async def asend_event(
    instance: WorkflowInstance | str, event_name: str, payload: Any = None
) -> InboundEvent | None:
    """:func:`send_event` for async code."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(send_event)(instance, event_name, payload)
