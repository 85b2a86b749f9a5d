"""The child-step helpers of one replay pass: start another workflow, wait for one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from django_workerflow.engine.failures import failure, note_failed_steps, strip_name
from django_workerflow.engine.pass_state import PassState
from django_workerflow.exceptions import (
    NondeterminismError,
    WorkerflowError,
    WorkflowInputError,
    WorkflowNotRegisteredError,
    WorkflowVersionConflictError,
)
from django_workerflow.values import jsonvalue
from django_workerflow.values.states import StepState, StepType

if TYPE_CHECKING:
    from django_workerflow.definition.workflow import WorkflowDefinition
    from django_workerflow.store.records import StepRecord

# Errors a refused start records on the step, raised again (same class) on every replay.
_START_FAILURES: dict[str, type[WorkerflowError]] = {
    cls.__name__: cls
    for cls in (WorkflowVersionConflictError, WorkflowInputError, WorkflowNotRegisteredError)
}


class ChildSteps(PassState):
    """``child``, ``start_child`` and ``wait_child`` as a pass executes them."""

    def child(
        self,
        step_id: str,
        workflow: str | type[WorkflowDefinition],
        *,
        input: Any = None,
        key: str | None = None,
        version: str | None = None,
    ) -> Any:
        record = self._child_record(step_id, workflow, input, key, version, False, waits=True)
        return self._child_outcome(record)

    def start_child(
        self,
        step_id: str,
        workflow: str | type[WorkflowDefinition],
        *,
        input: Any = None,
        key: str | None = None,
        version: str | None = None,
        detached: bool = False,
    ) -> str:
        record = self._child_record(step_id, workflow, input, key, version, detached, waits=False)
        if record.state == StepState.FAILED:
            self._raise_child_failure(record)
        if record.state != StepState.SUCCEEDED:
            # Recorded by a wait_child() or child() call in an earlier version of the code.
            self._mismatch(record, "start_child")
        return str(record.result)

    def wait_child(self, step_id: str, key: str) -> Any:
        self._reach(step_id)
        jsonvalue.check_identifier(key, what=f"The key child step '{step_id}' waits for")
        record = self.store.get(step_id)
        if record is not None and _reopened_start(record):
            self._check_kind(record, StepType.CHILD)
        if record is None or _reopened_start(record):
            record = self._write(
                self.store.wait_instance_step, step_id, parent_step_id=self._parent(), key=key
            )
        self._check_kind(record, StepType.CHILD)
        return self._child_outcome(record)

    # internals -----------------------------------------------------------------------

    def _child_record(
        self,
        step_id: str,
        workflow: str | type[WorkflowDefinition],
        input: Any,
        key: str | None,
        version: str | None,
        detached: bool,
        *,
        waits: bool,
    ) -> StepRecord:
        self._reach(step_id)
        record = self.store.get(step_id)
        if record is not None and _reopened_start(record):
            self._check_kind(record, StepType.CHILD)
        if record is None or _reopened_start(record):
            child_key = f"{self.instance_key}/{step_id}" if key is None else key
            self._boundary()
            record = self._write(
                self.store.start_child_step,
                step_id,
                parent_step_id=self._parent(),
                workflow=workflow,
                key=child_key,
                input=input,
                version=version,
                detached=detached,
                waits=waits,
            )
        self._check_kind(record, StepType.CHILD)
        return record

    def _child_outcome(self, record: StepRecord) -> Any:
        """The awaited instance's result; suspends until it has finished."""
        if record.state == StepState.WAITING:
            outcome = self.store.awaited_outcome(record)
            if outcome is not None and not outcome.finished:
                self._suspend(None)
            record = self._write(self.store.resolve_child_step, record.step_id, outcome)
        if record.state == StepState.FAILED:
            self._raise_child_failure(record)
        return record.result

    def _raise_child_failure(self, record: StepRecord) -> NoReturn:
        start_failure = _START_FAILURES.get(record.error_name)
        if start_failure is not None:
            error = start_failure(strip_name(record.error_message, record.error_name))
            note_failed_steps(error, [record.step_id])  # a retry starts the child again
            raise error
        raise failure(record.payload or {}, child=True, step_id=record.step_id)

    def _mismatch(self, record: StepRecord, helper: str) -> NoReturn:
        self.fatal = NondeterminismError(
            f"Instance '{self.instance_key}' reached child step '{record.step_id}' with "
            f"{helper}(), but its history recorded a child step that waits there. A workflow "
            "must call the same steps in the same order on every replay; register a new "
            "version to change its shape."
        )
        raise self.fatal


def _reopened_start(record: StepRecord) -> bool:
    """A child step whose start (or lookup) was refused, reopened by a retry: the pass
    starts (or looks up) the child again, in the same step row."""
    return record.type == StepType.CHILD and record.state == StepState.PENDING
