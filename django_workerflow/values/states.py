"""Statuses, step states and event types (a leaf: importable before apps are ready)."""

from django.db import models


class WorkflowStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATUSES = frozenset(
    {WorkflowStatus.COMPLETED, WorkflowStatus.FAILED, WorkflowStatus.CANCELLED}
)
ACTIVE_STATUSES = frozenset({WorkflowStatus.PENDING, WorkflowStatus.RUNNING})


class StepType(models.TextChoices):
    RUN = "run"
    SLEEP = "sleep"
    WAIT = "wait"
    CHILD = "child"
    PATCH = "patch"


class StepState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    WAITING = "waiting"
    ELAPSED = "elapsed"
    SATISFIED = "satisfied"
    TIMED_OUT = "timed_out"


class StepEventType(models.TextChoices):
    ATTEMPT_STARTED = "attempt_started"
    ATTEMPT_SUCCEEDED = "attempt_succeeded"
    ATTEMPT_FAILED = "attempt_failed"
    SLEEP_WAITING = "sleep_waiting"
    SLEEP_ELAPSED = "sleep_elapsed"
    WAIT_WAITING = "wait_waiting"
    WAIT_SATISFIED = "wait_satisfied"
    WAIT_TIMED_OUT = "wait_timed_out"
    CHILD_WAITING = "child_waiting"
    CHILD_FINISHED = "child_finished"


class WorkflowEventType(models.TextChoices):
    CREATED = "created"
    STARTED = "started"
    PAUSED = "paused"
    RESUMED = "resumed"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RETRIED = "retried"
    FORKED = "forked"
    #: A debounced start replaced the input of an instance that had not started yet.
    DEBOUNCED = "debounced"


class TickEnding(models.TextChoices):
    """How a tick ended (:attr:`~django_workerflow.runtime.tick.TickReport.outcome`)."""

    COMPLETED = "completed"
    FAILED = "failed"
    SUSPENDED = "suspended"
    YIELDED = "yielded"
    STOPPED = "stopped"
    BUSY = "busy"
    NOT_DUE = "not_due"
    INACTIVE = "inactive"
    UNREGISTERED = "unregistered"
    MISSING = "missing"
    QUEUED = "queued"
    #: Its definition is paused: left due, with no bell, until the definition is resumed.
    HELD = "held"


class AttemptEnding(models.TextChoices):
    """How a step attempt ended: the ``outcome`` of the finished attempts metric
    (interrupted: its worker died, and the next tick recorded it as failed)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class WakeCause(models.TextChoices):
    """What a tick was woken for: the ``cause`` of the wake lag metric, kept beside the
    alarm (``WorkflowInstance.alarm_cause``) by whatever set it. A pending instance's first
    tick counts ``schedule`` when a schedule's occurrence started it, else ``start``."""

    START = "start"
    SLEEP = "sleep"
    RETRY = "retry"
    EVENT = "event"
    CHILD = "child"
    SCHEDULE = "schedule"
    #: The re-check of an instance whose definition the worker that last looked lacked.
    UNREGISTERED = "unregistered"


class PassEnding(models.TextChoices):
    """How one replay pass of ``execute()`` ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    SUSPENDED = "suspended"


class StopReason(models.TextChoices):
    """Why a tick had to stop (:class:`~django_workerflow.values.control_flow.ExecutionStopped`)."""

    NOT_RUNNING = "not_running"
    LEASE_LOST = "lease_lost"
    STOPPED = "stopped"
    #: The instance's definition was paused (:func:`django_workerflow.pause_definition`).
    DEFINITION_PAUSED = "definition_paused"


class DefinitionPauseAction(models.TextChoices):
    """What an operator did to a whole definition (a ``DefinitionPauseRecord``)."""

    PAUSED = "paused"
    RESUMED = "resumed"
