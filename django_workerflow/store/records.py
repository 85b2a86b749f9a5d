"""The in-memory copy of an instance's steps, read in one query per replay pass."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from django_workerflow.exceptions import StepStateError
from django_workerflow.models import Step
from django_workerflow.store import executor, sql
from django_workerflow.store.instance_rows import converted
from django_workerflow.values.states import StepState, StepType

# The columns of a step, in StepRecord's field order.
STEP_FIELDS = sql.STEP_COLUMNS


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


def read_step(pk: int, parent_step_id: str | None) -> StepRecord:
    """Read one step row afresh."""
    record = StepRecord(*Step.objects.values_list(*STEP_FIELDS).get(pk=pk))
    record.parent_step_id = parent_step_id
    return record


def read_steps(instance_pk: int) -> list[StepRecord]:
    """Every step of an instance, oldest first, with their parents' step ids."""
    with connection.cursor() as cursor:
        executor.execute(cursor, "read_steps", {"instance": instance_pk})
        rows = cursor.fetchall()
    records = [StepRecord(*converted(Step, STEP_FIELDS, row)) for row in rows]
    by_pk = {record.pk: record for record in records}
    for record in records:
        if record.parent_pk is not None:
            record.parent_step_id = by_pk[record.parent_pk].step_id
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


class RecordedSteps:
    """The steps of one instance as recorded, read in one query and kept up to date by the
    store's writes."""

    def __init__(self, instance_pk: int) -> None:
        self.instance_pk = instance_pk
        self._by_id: dict[str, StepRecord] | None = None
        self._by_pk: dict[int, StepRecord] = {}

    def load(self) -> dict[str, StepRecord]:
        """Read every step of the instance in one query, replacing what is cached."""
        self._by_id = {}
        self._by_pk = {}
        for record in read_steps(self.instance_pk):
            self._remember(record)
        return self._by_id

    @property
    def steps(self) -> dict[str, StepRecord]:
        return self.load() if self._by_id is None else self._by_id

    def get(self, step_id: str) -> StepRecord | None:
        return self.steps.get(step_id)

    def require(self, step_id: str) -> StepRecord:
        record = self.get(step_id)
        if record is None:
            raise StepStateError(f"Step '{step_id}' not found in this workflow instance.")
        return record

    def has_running_or_waiting_child_steps(self, step_id: str) -> bool:
        """True if a direct child of ``step_id`` is pending, running or waiting.

        A run step found 'running' at replay with such a child was suspended by that child,
        not interrupted: its attempt goes on instead of counting as failed.
        """
        parent = self.require(step_id)
        return any(
            record.parent_pk == parent.pk and record.state in UNSETTLED_STATES
            for record in self.steps.values()
        )

    def _remember(self, record: StepRecord) -> None:
        if self._by_id is None:
            self._by_id = {}
        self._by_id[record.step_id] = record
        self._by_pk[record.pk] = record
        if record.parent_pk is not None and record.parent_step_id is None:
            parent = self._by_pk.get(record.parent_pk)
            record.parent_step_id = parent.step_id if parent else None
