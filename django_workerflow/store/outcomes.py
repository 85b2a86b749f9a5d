"""How a finished instance ended, read in one place for child steps, ``wait_result`` and
``on_finish``, and the error that a failed or cancelled one raises in whoever awaits it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django_workerflow.values.states import TERMINAL_STATUSES, WorkflowEventType, WorkflowStatus

_FIELDS = ("pk", "key", "status", "result", "error_name", "error_message", "finished_at")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an instance's end looks like to those who wait for it or hear of it.

    ``id`` identifies the outcome: for ``on_finish`` it is the delivery's id, the same on
    every redelivery (use it for idempotency); elsewhere it is the instance's id.
    """

    id: int
    key: str
    status: str
    result: Any
    error_name: str
    error_message: str
    reason: str | None
    finished_at: datetime | None

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def ok(self) -> bool:
        return self.status == WorkflowStatus.COMPLETED

    def as_json(self) -> dict[str, Any]:
        """The fields a failed child step keeps, so replays raise the same error."""
        return {
            "key": self.key,
            "status": self.status,
            "error_name": self.error_name,
            "error_message": self.error_message,
            "reason": self.reason,
        }


def read_outcomes(pks: list[int]) -> dict[int, Outcome]:
    """The outcomes of the instances ``pks`` (missing ones left out), in two queries at most."""
    # The package imports Outcome before the app registry is ready.
    from django_workerflow.models import (
        WorkflowInstance,  # a leaf otherwise: the package exports Outcome
    )

    rows = list(WorkflowInstance.objects.filter(pk__in=pks).values_list(*_FIELDS))
    cancelled = [row[0] for row in rows if row[2] == WorkflowStatus.CANCELLED]
    reasons = cancel_reasons(cancelled)
    return {
        pk: Outcome(
            id=pk,
            key=key,
            status=status,
            result=result,
            error_name=error_name,
            error_message=message,
            reason=reasons.get(pk),
            finished_at=finished_at,
        )
        for pk, key, status, result, error_name, message, finished_at in rows
    }


def read_outcome(pk: int) -> Outcome | None:
    return read_outcomes([pk]).get(pk)


def cancel_reasons(pks: list[int]) -> dict[int, str | None]:
    # The package imports Outcome before the app registry is ready.
    from django_workerflow.models import WorkflowEvent

    if not pks:
        return {}
    events = WorkflowEvent.objects.filter(
        instance_id__in=pks, type=WorkflowEventType.CANCELLED
    ).values_list("instance_id", "reason")
    return dict(events)
