"""Every error the engine raises, under one base class.

This module is a leaf: it imports nothing from the package.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class WorkerflowError(Exception):
    """Base class of every error raised by django-workerflow."""


class WorkflowInputError(WorkerflowError, ValueError):
    """An input, payload, step id, event name or duration is not acceptable."""


class WorkflowStateError(WorkerflowError):
    """The operation is not allowed in the instance's current status."""


class InstanceTransitionError(WorkflowStateError):
    """A change of an instance's status that the state machine does not allow
    (``values/transitions.py``), or one written on a row whose status changed since it was
    read. Nothing was written.

    The runtime's verbs check the status first and raise their own ``WorkflowStateError``
    (or return False); seeing this one means a caller skipped that check or the row lock.
    """


class ReadOnlyHistoryError(WorkerflowError, TypeError):
    """A write to :class:`~django_workerflow.models.StepEvent`, which reads a database view of
    the whole step history: the engine alone records step events."""


class WorkflowNotRegisteredError(WorkerflowError, LookupError):
    """No definition is registered under the requested name (and version)."""


class WorkflowVersionConflictError(WorkerflowError):
    """A start() asked for a version other than the one the instance is pinned to."""


class StepOutcomeError(WorkerflowError):
    """A step's recorded failure; ``step_id`` names the step (None when raised by user code).

    The engine sets it when it raises the error from a workflow, on the first run and on
    every replay: ``NonRetryableStepError("declined", step_id="charge")``.
    """

    step_id: str | None

    def __init__(self, *args: object, step_id: str | None = None) -> None:
        super().__init__(*args)
        self.step_id = step_id


class NonRetryableStepError(StepOutcomeError):
    """Raise from a step callback to fail the step at once, without further attempts.

    A run step that failed this way raises it again on every replay, with the recorded
    message, so code that catches it takes the same path every time.
    """


class MaxAttemptsExceededError(StepOutcomeError):
    """A run step failed on each of its configured attempts."""


class WorkerLostError(StepOutcomeError):
    """A run step's attempts kept killing the worker process that ran them (a signal such as
    SIGKILL, running out of memory, a crash in C code): after
    ``WORKERFLOW_MAX_INTERRUPTED_ATTEMPTS`` such attempts in a row the step is failed instead
    of run again."""


class StepTimeoutError(StepOutcomeError):
    """A run step's attempt ran longer than its ``timeout`` and was interrupted (or, where it
    could not be interrupted, was found over time when its callback returned).

    It fails that attempt only: the step is retried under its own ``max_attempts`` and
    ``backoff`` like any failure. It is not a :class:`TimeoutError` on purpose: network code
    often catches ``OSError`` around a read, and would swallow it.
    """


class WorkflowTimeoutError(WorkerflowError):
    """An instance did not finish within its ``timeout`` of running (its definition's, or
    the one its ``start()`` gave), not counting the time it spent paused.

    It fails the instance through the usual failure path (its unfinished children are
    cancelled, ``on_finish`` hears it), even where the workflow's code catches it; a
    ``retry()`` runs the instance again with a fresh budget. ``key`` names the instance and
    ``timeout`` is its budget in seconds. Like :class:`StepTimeoutError` it is not a
    :class:`TimeoutError`, which network code often catches.
    """

    def __init__(self, message: str, *, key: str = "", timeout: float | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.timeout = timeout


class WaitStepTimedOutError(StepOutcomeError):
    """A wait step's deadline passed before a matching event arrived."""


class WorkflowDefinitionError(WorkerflowError, ImproperlyConfigured):
    """The definition is broken in a way no retry can fix: an invalid declaration (raised
    when the class is defined or registered), or a step called inside an atomic run step
    (raised in a tick, where it fails the workflow even when user code catches it).

    It is also Django's ``ImproperlyConfigured``, as the docs promise for a class statement
    or a registration that is refused; errors found by replaying are :class:`ReplayError`.
    """


class ReplayError(WorkerflowError):
    """The workflow's code broke a replay rule: a replay (in a tick, ``check-replay`` or the
    harness's check) reached its recorded steps in a way the history forbids. It fails the
    workflow even when user code catches it; the fix is in the code (a step id of its own
    for each call, a new version to change the workflow's shape)."""


class DuplicateStepIdError(ReplayError):
    """One step id was reached twice in a single execution, or a recorded step was reached
    inside another run step than the one it was recorded in."""


class NondeterminismError(ReplayError):
    """A replay reached a recorded step id as a different kind of step."""


class StepStateError(WorkerflowError):
    """The step store refused a transition that the step's recorded state does not allow.

    Raised by the internal step store; seeing it from a workflow means a bug in the engine.
    """


class WorkflowFailedError(StepOutcomeError):
    """The awaited workflow instance failed (or, as the subclass says, was cancelled).

    Raised in a parent by ``self.child()`` / ``self.wait_child()`` (``step_id`` names that
    child step, which a ``retry()`` of the parent reopens) and by ``wait_result()``.
    ``key``, ``status``, ``error_name``, ``error_message`` and ``reason`` describe the
    instance that finished badly (``reason`` is its cancel reason, if any).
    """

    def __init__(
        self,
        message: str,
        *,
        key: str = "",
        status: str = "",
        error_name: str = "",
        error_message: str = "",
        reason: str | None = None,
        step_id: str | None = None,
    ) -> None:
        super().__init__(message, step_id=step_id)
        self.key = key
        self.status = status
        self.error_name = error_name
        self.error_message = error_message
        self.reason = reason


class WorkflowCancelledError(WorkflowFailedError):
    """The awaited workflow instance was cancelled."""


class DatabaseUnavailableError(WorkerflowError):
    """The database could not be reached (a restart, a failover, a dropped connection).

    A worker's tick that lost its connection ends with it: nothing more was recorded, the
    instance's lease runs out and the next tick recovers it. Retry once the database is back
    (``manage.py workerflow health`` answers ``DATABASE UNAVAILABLE`` until then).
    """
