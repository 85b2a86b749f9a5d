"""The state of one replay pass, and the checks every step helper makes when reached."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from django.db import DatabaseError

from django_workerflow.exceptions import (
    DuplicateStepIdError,
    NondeterminismError,
    WorkflowDefinitionError,
)
from django_workerflow.values import jsonvalue
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.control import ExecutionStopped, Suspension, TickAborted
from django_workerflow.values.states import StopReason

if TYPE_CHECKING:
    from django_workerflow.store.records import StepRecord
    from django_workerflow.store.steps import StepStore


_Written = TypeVar("_Written")


def _inside(parent_step_id: str | None) -> str:
    return f"inside run step '{parent_step_id}'" if parent_step_id else "directly in execute()"


class PassState:
    """What one pass has seen and decided so far: the steps reached, the due times of the
    suspended ones, why it stopped; :class:`~.execution.Execution` adds the step helpers."""

    def __init__(
        self,
        *,
        instance_key: str,
        store: StepStore,
        deadline: float,
        interrupted_suspects: set[str] | None = None,
    ) -> None:
        self.instance_key = instance_key
        self.store = store
        self.deadline = deadline
        # Run steps that were 'running' when a crashed tick's lease was taken over; shared by
        # the passes of one tick, and emptied as each is settled.
        self.interrupted_suspects = (
            interrupted_suspects if interrupted_suspects is not None else set()
        )
        self.seen_step_ids: set[str] = set()
        self.parents: list[str] = []
        self.due_times: list[datetime | None] = []
        self.suspended = False
        self.stop_reason: StopReason | None = None
        self.yielded = False
        self.attempts_started = 0
        self.fatal: WorkflowDefinitionError | None = None
        self.atomic_step: str | None = None

    # Outcome of the pass ---------------------------------------------------------------

    def next_due(self) -> datetime | None:
        """The earliest time at which a suspended step can make progress (None: an event)."""
        due = [when for when in self.due_times if when is not None]
        return min(due) if due else None

    # Shared checks ---------------------------------------------------------------------

    def _reach(self, step_id: str) -> None:
        if self.fatal is not None:
            raise self.fatal
        jsonvalue.check_identifier(step_id, what="A step id")
        if self.atomic_step is not None:
            self.fatal = WorkflowDefinitionError(
                f"Step '{step_id}' is called inside the atomic run step '{self.atomic_step}'. "
                "An atomic step runs in one database transaction and cannot contain other "
                "steps; make the outer step non-atomic or move the inner step out of it."
            )
            raise self.fatal
        if step_id in self.seen_step_ids:
            self.fatal = DuplicateStepIdError(
                f"Step id '{step_id}' was already used earlier in this workflow execution. "
                "Steps must be uniquely identified within a single workflow execution."
            )
            raise self.fatal
        self.seen_step_ids.add(step_id)

    def _check_kind(self, record: StepRecord, kind: str) -> None:
        if record.type != kind:
            self.fatal = NondeterminismError(
                f"Instance '{self.instance_key}' reached step '{record.step_id}' as a {kind}, "
                f"but its history recorded a {record.type} there. A workflow must call the "
                "same steps in the same order on every replay; register a new version to "
                "change its shape."
            )
            raise self.fatal
        if record.parent_step_id != self._parent():
            self.fatal = DuplicateStepIdError(
                f"Step id '{record.step_id}' is reached {_inside(self._parent())}, but it was "
                f"recorded {_inside(record.parent_step_id)}. Steps must be uniquely identified "
                "within a single workflow execution, nested steps included; give each call "
                "its own id."
            )
            raise self.fatal

    def _recorded(self, step_id: str) -> StepRecord | None:
        """The recorded step (None on first reach, or for an id that is not a string: the
        step helper reports that)."""
        return self.store.get(step_id) if isinstance(step_id, str) else None

    def _parent(self) -> str | None:
        return self.parents[-1] if self.parents else None

    def _boundary(self) -> None:
        """Before a new attempt starts: yield the worker once the tick's budget is spent
        (after at least one attempt of this pass, so that every tick makes progress)."""
        if self.attempts_started and time.monotonic() >= self.deadline:
            self.yielded = True
            self._suspend(clock_now())
        self.attempts_started += 1

    def _suspend(self, due: datetime | None) -> NoReturn:
        self.suspended = True
        self.due_times.append(due)
        raise Suspension()

    def _write(
        self, method: Callable[..., _Written], *args: Any, fuse: bool = False, **kwargs: Any
    ) -> _Written:
        """A step write. A success held in memory is written first, unless ``method`` writes
        it itself (``fuse``: starting a new run step, or holding the next success)."""
        try:
            if not fuse:
                self.store.flush()
            return method(*args, **kwargs)
        except ExecutionStopped as stopped:
            self.suspended = True
            self.stop_reason = stopped.reason
            raise
        except DatabaseError as exc:
            # Not the workflow's failure: user code must not see (or swallow) it.
            raise TickAborted() from exc

    def flush(self) -> None:
        """Write the success held in memory (the pass is ending)."""
        if self.store.pending_success is not None:
            self._write(self.store.flush, fuse=True)
