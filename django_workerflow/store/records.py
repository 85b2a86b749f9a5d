"""A recorded step as a pass sees it, in memory (read by :mod:`.steps` in one query per
pass), and the rules read off a set of them. Pure: no database access here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django_workerflow.values.states import StepState, StepType

#: The columns of a step, in :class:`StepRecord`'s field order.
STEP_FIELDS = tuple(
    [
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
        "child_instance_id",
    ]
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
    child_instance_pk: int | None = None
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


def name_parent(record: StepRecord, step_id_of: Callable[[int], str | None]) -> None:
    """Give ``record`` its parent's step id, ``step_id_of`` its ``parent_pk``: the one place
    the parent's id is derived."""
    if record.parent_pk is not None:
        record.parent_step_id = step_id_of(record.parent_pk)


def name_parents(records: list[StepRecord]) -> list[StepRecord]:
    """Give each of one instance's ``records`` its parent's step id (:func:`name_parent`)."""
    step_ids = {record.pk: record.step_id for record in records}
    for record in records:
        name_parent(record, step_ids.get)
    return records


# States in which a step still holds up its parent run step.
UNSETTLED_STATES = frozenset({StepState.PENDING, StepState.RUNNING, StepState.WAITING})


def unreached_steps(steps: dict[str, StepRecord], seen: set[str]) -> list[str]:
    """Recorded steps a whole replay pass should have reached again but did not: the code
    changed under the instance.

    Steps nested in a settled run step are not expected (its callback does not run again),
    nor ``patched()`` markers: removing a patch once no instance needs its old branch is safe.
    """
    unreached = []
    for step_id, step in steps.items():
        if step_id in seen or step.type == StepType.PATCH:
            continue
        parent = steps.get(step.parent_step_id) if step.parent_step_id else None
        if parent is None or parent.state == StepState.RUNNING:
            unreached.append(step_id)
    return unreached
