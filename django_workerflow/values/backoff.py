"""Retry delays of run steps."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from django_workerflow.values import storable
from django_workerflow.values.jsonvalue import to_timedelta

Backoff = Callable[[int], float | int | timedelta]

_DEFAULT_SCHEDULE = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
_DEFAULT_CAP = 10.0


def default_backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt``: 0.25, 0.5, 1, 2, 4, 8, then 10."""
    if 1 <= attempt <= len(_DEFAULT_SCHEDULE):
        return _DEFAULT_SCHEDULE[attempt - 1]
    return _DEFAULT_CAP


def retry_delay(attempt: int, backoff: Backoff | None) -> timedelta:
    """The delay before the attempt after ``attempt``, validated like any user duration."""
    delay = (backoff or default_backoff)(attempt)
    return to_timedelta(delay, what=f"The backoff delay after attempt {attempt}")


def backoff_failure(step_id: str, error_message: str, exc: Exception) -> tuple[str, str]:
    """The error a run step fails with when its backoff gives no usable delay."""
    return "WorkflowInputError", storable.safe_text(
        f"WorkflowInputError: Run step '{step_id}' failed ({error_message}) and its backoff "
        f"gave no usable delay: {storable.error_message(exc)}",
        max_length=storable.MAX_ERROR_MESSAGE_LENGTH,
    )
