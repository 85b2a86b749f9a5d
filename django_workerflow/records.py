"""The in-memory copy of an instance's steps, read in one query per replay pass."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .models import Step

# The columns of a step, in StepRecord's field order.
STEP_FIELDS = (
    "id",
    "step_id",
    "type",
    "state",
    "parent_id",
    "attempt_count",
    "max_attempts",
    "next_attempt_at",
    "result",
    "error_name",
    "error_message",
    "wake_at",
    "event_name",
    "timeout_at",
    "payload",
    "resolved_at",
    "created_at",
)


@dataclass(slots=True)
class StepRecord:
    """The in-memory copy of one ``Step`` row."""

    pk: int
    step_id: str
    type: str
    state: str
    parent_pk: int | None
    attempt_count: int
    max_attempts: int | None
    next_attempt_at: datetime | None
    result: Any
    error_name: str
    error_message: str
    wake_at: datetime | None
    event_name: str
    timeout_at: datetime | None
    payload: Any
    resolved_at: datetime | None
    created_at: datetime
    parent_step_id: str | None = None

    @classmethod
    def new(
        cls,
        pk: int,
        step_id: str,
        type: str,
        state: str,
        created_at: datetime,
        *,
        parent_pk: int | None,
        parent_step_id: str | None,
        attempt_count: int = 0,
        max_attempts: int | None = None,
        wake_at: datetime | None = None,
        event_name: str = "",
        timeout_at: datetime | None = None,
    ) -> StepRecord:
        """The record of a step just inserted: no outcome, no error, no payload yet."""
        return cls(
            pk=pk,
            step_id=step_id,
            type=type,
            state=state,
            parent_pk=parent_pk,
            attempt_count=attempt_count,
            max_attempts=max_attempts,
            next_attempt_at=None,
            result=None,
            error_name="",
            error_message="",
            wake_at=wake_at,
            event_name=event_name,
            timeout_at=timeout_at,
            payload=None,
            resolved_at=None,
            created_at=created_at,
            parent_step_id=parent_step_id,
        )


def read_step(pk: int, parent_step_id: str | None) -> StepRecord:
    """Read one step row afresh."""
    row = Step.objects.values_list(*STEP_FIELDS).get(pk=pk)
    return StepRecord(*row, parent_step_id=parent_step_id)


def read_steps(instance_pk: int) -> list[StepRecord]:
    """Every step of an instance, oldest first, with their parents' step ids."""
    rows = (
        Step.objects.filter(instance_id=instance_pk)
        .order_by("created_at", "id")
        .values_list(*STEP_FIELDS)
    )
    records = [StepRecord(*row) for row in rows]
    by_pk = {record.pk: record for record in records}
    for record in records:
        if record.parent_pk is not None:
            record.parent_step_id = by_pk[record.parent_pk].step_id
    return records
