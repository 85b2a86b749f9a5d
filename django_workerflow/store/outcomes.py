"""How a finished instance ended, read in one place for child steps, ``wait_result`` and
``on_finish``: the :class:`~django_workerflow.values.outcome.Outcome` of instances by id."""

from __future__ import annotations

from django_workerflow.models import WorkflowEvent, WorkflowInstance
from django_workerflow.values.outcome import Outcome
from django_workerflow.values.states import WorkflowEventType, WorkflowStatus

_FIELDS = ("pk", "key", "status", "result", "error_name", "error_message", "finished_at")


def read_outcomes(pks: list[int]) -> dict[int, Outcome]:
    """The outcomes of the instances ``pks`` (missing ones left out), in two queries at most."""
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
    if not pks:
        return {}
    events = WorkflowEvent.objects.filter(
        instance_id__in=pks, type=WorkflowEventType.CANCELLED
    ).values_list("instance_id", "reason")
    return dict(events)
