"""How an instance ended, as those who wait for it or hear of it see it: ``on_finish``,
``wait_result`` and child steps. ``store/outcomes.py`` reads it from the database."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django_workerflow.values.states import TERMINAL_STATUSES, WorkflowStatus


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
