"""What one branch of ``all_settled()`` came to: its value or the error it raised."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SettledResult:
    """The outcome of one branch of
    :meth:`~django_workerflow.definition.workflow.WorkflowDefinition.all_settled`."""

    ok: bool
    value: Any = None
    error: BaseException | None = None
