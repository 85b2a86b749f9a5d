"""An instance's progress, as a workflow reports it and a reader sees it.

A progress value is not a step: it is the last ``set_progress()`` call of the instance's
passes, kept on the instance row. Replays make the same calls again, so a value equal to
the stored one is never written twice, and a changed call is never drift.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from django_workerflow.exceptions import WorkflowInputError
from django_workerflow.values import storable

#: The longest progress message, in characters.
MAX_MESSAGE_LENGTH = 2_000
#: The largest count stored exactly (a double holds every integer up to 2**53).
MAX_COUNT = 2**53

Number = int | float


@dataclass(frozen=True, slots=True)
class Progress:
    """How far an instance has come: ``current`` of ``total`` (None: no known total), with a
    short ``message``, as of ``updated_at`` (when the value was first set)."""

    current: Number
    total: Number | None
    message: str
    updated_at: datetime

    @property
    def fraction(self) -> float | None:
        """``current / total`` between 0 and 1; None without a total (a total of 0: 1.0)."""
        if self.total is None:
            return None
        if self.total == 0:
            return 1.0
        return self.current / self.total

    def same_report(self, other: Progress | None) -> bool:
        """True if ``other`` reports the same numbers and message (whenever it was set)."""
        return other is not None and (self.current, self.total, self.message) == (
            other.current,
            other.total,
            other.message,
        )


def checked(current: object, total: object, message: object) -> tuple[Number, Number | None, str]:
    """The arguments of ``set_progress()`` as stored, or WorkflowInputError saying what is
    wrong with them."""
    current = _number(current, what="current")
    total = None if total is None else _number(total, what="total")
    if total is not None and current > total:
        raise WorkflowInputError(
            f"set_progress() got current={current!r} greater than total={total!r}; the current "
            "count must be at most the total."
        )
    if not isinstance(message, str):
        raise WorkflowInputError(
            f"The progress message must be a string, not {type(message).__name__}."
        )
    if len(message) > MAX_MESSAGE_LENGTH:
        raise WorkflowInputError(
            f"The progress message is {len(message)} characters long, more than the limit of "
            f"{MAX_MESSAGE_LENGTH}; shorten it."
        )
    storable.check_text(message, what="The progress message")
    return current, total, message


def from_row(
    current: float | None, total: float | None, message: str, updated_at: datetime | None
) -> Progress | None:
    """The value the instance row's progress columns hold (None: never set)."""
    if current is None or updated_at is None:
        return None
    return Progress(_whole(current), None if total is None else _whole(total), message, updated_at)


def _number(value: object, *, what: str) -> Number:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WorkflowInputError(
            f"The progress {what} must be a number, not {type(value).__name__}."
        )
    # An int is compared as it is: math.isnan() of one beyond a float's range overflows.
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise WorkflowInputError(f"The progress {what} must be a finite number, not {value!r}.")
    if value < 0:
        raise WorkflowInputError(f"The progress {what} must not be negative, not {value!r}.")
    if value > MAX_COUNT:
        raise WorkflowInputError(
            f"The progress {what} {value!r} is more than the limit of {MAX_COUNT} (the "
            "largest count stored exactly)."
        )
    return _whole(value)


def _whole(value: float) -> Number:
    """A whole number as an int (3.0 -> 3), so that a count reads as one."""
    return int(value) if float(value).is_integer() else float(value)
