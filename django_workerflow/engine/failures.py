"""How a run step's failure reads: recorded as a name and a message, raised again on replay."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from django_workerflow.exceptions import (
    MaxAttemptsExceededError,
    NonRetryableStepError,
    StepOutcomeError,
    WaitStepTimedOutError,
    WorkerLostError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowTimeoutError,
)
from django_workerflow.values import storable
from django_workerflow.values.states import WorkflowStatus

if TYPE_CHECKING:
    from django_workerflow.store.records import StepRecord

# The attribute that names, on an error escaping a pass, the steps whose failure it is
# besides its own ``step_id`` (see failed_step_ids).
_FAILED_STEPS_ATTRIBUTE = "_workerflow_failed_steps"

INTERRUPTED_ERROR_NAME = "StepInterruptedError"
INTERRUPTED_MESSAGE = "Step execution was interrupted before its outcome was durably recorded."


def worker_lost_message(what: str, interruptions: int) -> str:
    """Why ``what`` (``Run step 'charge'``), whose attempts keep killing their worker
    process, is failed."""
    return (
        f"{what} was interrupted {interruptions} times in a row: the worker "
        "process running it died each time (killed by a signal such as SIGKILL, out of memory, "
        "or a crash in C code) before the attempt's outcome was recorded. It is failed instead "
        "of run again; look for the cause in the worker's logs, then retry the instance."
    )


# Failures that replay identically, so retrying the step that saw them cannot help.
REPLAYED_FAILURES: dict[str, type[StepOutcomeError]] = {
    cls.__name__: cls
    for cls in (
        NonRetryableStepError,
        MaxAttemptsExceededError,
        WaitStepTimedOutError,
        WorkerLostError,
    )
}


def error_message(exc: BaseException) -> str:
    """``"<ClassName>: <message>"``, or the class name alone when the message is empty."""
    return storable.error_message(exc)


def recorded_name(exc: BaseException) -> str:
    """The error name a failed attempt records. A subclass of a failure that replays is
    recorded under that failure's name (its message keeps the subclass's name): a class
    cannot be rebuilt from its name on replay, and the replay must raise what the first run
    raised."""
    for name, replayed in REPLAYED_FAILURES.items():
        if isinstance(exc, replayed):
            return name
    return storable.error_name(exc)


def strip_name(message: str, name: str) -> str:
    prefix = f"{name}: "
    if message.startswith(prefix):
        return message[len(prefix) :]
    return "" if message == name else message


def recorded_failure(record: StepRecord) -> StepOutcomeError:
    """The exception a failed run step raises, the same on the first run and on replay."""
    replayed = REPLAYED_FAILURES.get(record.error_name)
    if replayed is not None:
        return replayed(strip_name(record.error_message, record.error_name), step_id=record.step_id)
    if record.attempt_count >= (record.max_attempts or 1):
        return MaxAttemptsExceededError(
            f"Run step '{record.step_id}' exhausted its configured attempts.",
            step_id=record.step_id,
        )
    return NonRetryableStepError(
        strip_name(record.error_message, record.error_name), step_id=record.step_id
    )


def failure(
    details: dict[str, Any], *, child: bool, step_id: str | None = None
) -> WorkflowFailedError:
    """The error a failed or cancelled instance raises in whoever awaits it.

    ``details`` holds ``key``, ``status``, ``error_name``, ``error_message`` and ``reason``.
    """
    noun = "Child instance" if child else "Instance"
    key = details.get("key", "")
    reason = details.get("reason")
    fields = {
        "key": key,
        "status": details.get("status", ""),
        "error_name": details.get("error_name", ""),
        "error_message": details.get("error_message", ""),
        "reason": reason,
        "step_id": step_id,
    }
    if fields["status"] == WorkflowStatus.CANCELLED:
        why = f": {reason}" if reason else ""
        return WorkflowCancelledError(f"{noun} '{key}' was cancelled{why}", **fields)
    error = fields["error_message"] or fields["error_name"] or "no error recorded"
    return WorkflowFailedError(f"{noun} '{key}' failed: {error}", **fields)


def instance_timed_out(key: str, seconds: float) -> WorkflowTimeoutError:
    """The error that fails the instance ``key`` when its timeout of ``seconds`` passes."""
    return WorkflowTimeoutError(
        f"Instance '{key}' did not finish within {seconds:g} s of running (timeout="
        f"{seconds:g} s; time spent paused does not count); retry() runs it again with a "
        "fresh budget, or start it with a longer timeout.",
        key=key,
        timeout=seconds,
    )


def note_failed_steps(exc: BaseException, step_ids: list[str]) -> None:
    """Name ``step_ids`` as steps whose failure ``exc`` is too: a refused child start (its
    error is not a :class:`StepOutcomeError`), the other failed branches of an ``all()``."""
    known = failed_step_ids(exc)
    added = [step_id for step_id in step_ids if step_id not in known]
    if not added:
        return
    noted = [*getattr(exc, _FAILED_STEPS_ATTRIBUTE, ()), *added]
    with contextlib.suppress(AttributeError, TypeError):  # an exception that takes none
        setattr(exc, _FAILED_STEPS_ATTRIBUTE, noted)


def failed_step_ids(exc: BaseException) -> list[str]:
    """The steps whose failure ``exc`` is, its own first: what a retry reopens when it fails
    the instance."""
    own = exc.step_id if isinstance(exc, StepOutcomeError) else None
    noted = list(getattr(exc, _FAILED_STEPS_ATTRIBUTE, ()))
    return ([own] if own else []) + [step_id for step_id in noted if step_id != own]
