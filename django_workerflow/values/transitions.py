"""The instance's state machine: which status may follow which.

:data:`SOURCES` is the one table of allowed moves, stated as the same table in
docs/concepts.md (``tests/values/test_transitions.py`` holds them equal). Every
status an instance is given goes through it: an instance is created :data:`CREATED`, and
each later move is a transition of :class:`~django_workerflow.models.WorkflowInstance`
that :func:`check` s the move first and writes it only if the row still has the status it
moves from.
"""

from __future__ import annotations

from collections.abc import Mapping

from django_workerflow.exceptions import InstanceTransitionError
from django_workerflow.values.states import WorkflowStatus

#: The status every instance is created with (start(), start_many(), fork(), a child step).
CREATED = WorkflowStatus.PENDING

_PENDING = WorkflowStatus.PENDING
_RUNNING = WorkflowStatus.RUNNING
_PAUSED = WorkflowStatus.PAUSED
_CANCELLED = WorkflowStatus.CANCELLED

#: For each status, the statuses an instance may move to it from. A cancelled instance
#: goes back to what it was only when the retry of the parent whose finish cancelled it
#: takes that cancel back.
SOURCES: Mapping[WorkflowStatus, frozenset[WorkflowStatus]] = {
    WorkflowStatus.PENDING: frozenset({_CANCELLED}),
    WorkflowStatus.RUNNING: frozenset({_PENDING, _PAUSED, WorkflowStatus.FAILED, _CANCELLED}),
    WorkflowStatus.PAUSED: frozenset({_RUNNING, _CANCELLED}),
    WorkflowStatus.COMPLETED: frozenset({_RUNNING}),
    WorkflowStatus.FAILED: frozenset({_RUNNING}),
    WorkflowStatus.CANCELLED: frozenset({_PENDING, _RUNNING, _PAUSED}),
}


def allows(source: str, target: str) -> bool:
    """Whether the table lets an instance move from ``source`` to ``target``."""
    return source in SOURCES.get(WorkflowStatus(target), ())


def check(key: str, source: str, target: str) -> None:
    """Refuse a move the table does not allow, naming the instance and both statuses."""
    if allows(source, target):
        return
    allowed = [f"'{status}'" for status in _ordered(SOURCES[WorkflowStatus(target)])]
    listed = ", ".join(allowed[:-1]) + " or " + allowed[-1] if len(allowed) > 1 else allowed[0]
    raise InstanceTransitionError(
        f"Instance '{key}' cannot move from status '{source}' to '{target}': an instance "
        f"reaches '{target}' only from {listed} (docs/concepts.md#instance-statuses). "
        "Nothing was written; read the instance again and act on the status it has now."
    )


def changed_under(key: str, read: str, found: str | None, target: str) -> InstanceTransitionError:
    """The error for a move written on a stale row: the instance was read with status
    ``read``, but the row had ``found`` (None: the row is gone) when it was written."""
    now = f"status '{found}'" if found is not None else "no row any more"
    return InstanceTransitionError(
        f"Instance '{key}' cannot move from status '{read}' to '{target}': its row has {now}, "
        "changed since it was read. Nothing was written; lock the row "
        "(select_for_update), read it again and act on the status it has now."
    )


def _ordered(statuses: frozenset[WorkflowStatus]) -> list[WorkflowStatus]:
    """``statuses`` in the order :class:`WorkflowStatus` declares them."""
    return [status for status in WorkflowStatus if status in statuses]
