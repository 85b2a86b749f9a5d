"""Child steps: start (or find) another instance and record the link, in one transaction.

The child instance is created in the same fenced transaction that records the step, so no
replay, crash or second worker ever starts a second child for one step: either both
commit or neither does, and a replay finds the step. A waiting child step is resolved by
the parent's next pass once the awaited instance has finished (its finishing transaction
wakes the parent: :mod:`django_workerflow.finishing`).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django_workerflow.engine.outcomes import Outcome, read_outcomes
from django_workerflow.exceptions import WorkerflowError, WorkflowInputError
from django_workerflow.models import Step, WorkflowInstance
from django_workerflow.store.records import StepRecord
from django_workerflow.store.transactions import explain_refusal, fenced, insert_event
from django_workerflow.store.waits import WaitingStepStore
from django_workerflow.values import storable
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.states import StepEventType, StepState, StepType, WorkflowStatus

if TYPE_CHECKING:
    from django_workerflow.definition.workflow import WorkflowDefinition


class ChildStepStore(WaitingStepStore):
    """Writes the child steps of one instance (see :class:`~.store.StepStore`)."""

    _outcomes: dict[int, Outcome] | None = None

    def start_child_step(
        self,
        step_id: str,
        *,
        parent_step_id: str | None,
        workflow: str | type[WorkflowDefinition],
        key: str,
        input: Any,
        version: str | None,
        detached: bool,
        waits: bool,
    ) -> StepRecord:
        """Start the child (idempotently, as ``start()``) and record the step linked to it.

        ``waits``: the step waits for the child's end; otherwise it succeeds at once with
        the child's key. A start that ``start()`` refuses fails the step with its error.
        """
        from django_workerflow.runtime import (
            verbs,
        )  # the runtime imports the tick, which imports this module

        now = clock_now()
        with fenced(self.lease, now, require_running=True) as cursor:
            try:
                child = verbs.start(
                    workflow,
                    key=key,
                    input=input,
                    version=version,
                    parent_pk=self.instance_pk,
                    detached=detached,
                )
            except WorkerflowError as exc:
                return self._insert(cursor, step_id, parent_step_id, None, now, failure=exc)
            if waits:
                return self._insert(cursor, step_id, parent_step_id, child.pk, now)
            return self._insert(cursor, step_id, parent_step_id, child.pk, now, result=child.key)

    def wait_instance_step(
        self, step_id: str, *, parent_step_id: str | None, key: str
    ) -> StepRecord:
        """Record a step waiting for the instance ``key`` (any instance) to finish."""
        now = clock_now()
        with fenced(self.lease, now, require_running=True) as cursor:
            pk = WorkflowInstance.objects.filter(key=key).values_list("pk", flat=True).first()
            if pk is None:
                missing = WorkflowInputError(
                    f"Child step '{step_id}' waits for instance '{key}', but no instance has "
                    "that key. Start it first, or wait for the key start_child() returned."
                )
                return self._insert(cursor, step_id, parent_step_id, None, now, failure=missing)
            return self._insert(cursor, step_id, parent_step_id, pk, now)

    def awaited_outcome(self, record: StepRecord) -> Outcome | None:
        """How the instance a waiting child step awaits stands now (None: it is gone).

        Read once per pass for every waiting child step, in one query.
        """
        if self._outcomes is None:
            waiting = [
                step.child_instance_pk
                for step in self.steps.values()
                if step.type == StepType.CHILD
                and step.state == StepState.WAITING
                and step.child_instance_pk is not None
            ]
            self._outcomes = read_outcomes(waiting)
        pk = record.child_instance_pk
        if pk is None:
            return None
        if pk not in self._outcomes:
            # A step created in this pass, after the others were read.
            self._outcomes.update(read_outcomes([pk]))
        return self._outcomes.get(pk)

    def resolve_child_step(self, step_id: str, outcome: Outcome | None) -> StepRecord:
        """waiting -> succeeded with the awaited instance's result, or -> failed."""
        record = self.require(step_id)
        now = clock_now()
        ok = outcome is not None and outcome.ok
        state = StepState.SUCCEEDED if ok else StepState.FAILED
        changes: dict[str, Any] = {"state": state, "resolved_at": now}
        if outcome is not None and ok:
            changes["result"] = outcome.result
        elif outcome is not None:
            changes.update(
                error_name=_failure_name(outcome),
                error_message=outcome.error_message or outcome.reason or "",
                payload=outcome.as_json(),
            )
        else:
            changes.update(
                error_name="WorkflowFailedError",
                error_message="The awaited instance was deleted before it finished.",
                payload={"key": "", "status": "", "error_name": "", "error_message": ""},
            )
        with fenced(self.lease, now, require_running=False) as cursor:
            updated = Step.objects.filter(pk=record.pk, state=StepState.WAITING).update(**changes)
            if updated != 1:
                raise explain_refusal(self.instance_pk, step_id, StepState.WAITING, None, now)
            insert_event(cursor, self.instance_pk, record.pk, now, StepEventType.CHILD_FINISHED)
        record.state = state
        record.resolved_at = now
        record.result = changes.get("result")
        record.error_name = changes.get("error_name", "")
        record.error_message = changes.get("error_message", "")
        record.payload = changes.get("payload")
        return record

    def _insert(
        self,
        cursor: Any,
        step_id: str,
        parent_step_id: str | None,
        child_pk: int | None,
        now: datetime,
        *,
        result: Any = None,
        failure: WorkerflowError | None = None,
    ) -> StepRecord:
        parent_pk = self.require(parent_step_id).pk if parent_step_id else None
        if failure is not None:
            state = StepState.FAILED
        elif result is not None:
            state = StepState.SUCCEEDED
        else:
            state = StepState.WAITING
        fields: dict[str, Any] = {
            "state": state,
            "child_instance_id": child_pk,
            "result": result,
            "error_name": storable.error_name(failure) if failure else "",
            "error_message": storable.safe_text(
                storable.describe(failure), max_length=storable.MAX_ERROR_MESSAGE_LENGTH
            )
            if failure
            else "",
            "resolved_at": None if state == StepState.WAITING else now,
        }
        reopened = self.get(step_id)
        if reopened is None:
            pk = Step.objects.create(
                instance_id=self.instance_pk,
                step_id=step_id,
                type=StepType.CHILD,
                parent_id=parent_pk,
                created_at=now,
                **fields,
            ).pk
            created_at = now
        else:
            # A refused start that a retry reopened (pending): the same row starts again.
            Step.objects.filter(pk=reopened.pk, state=StepState.PENDING).update(**fields)
            pk, created_at = reopened.pk, reopened.created_at
        insert_event(cursor, self.instance_pk, pk, now, StepEventType.CHILD_WAITING)
        if state != StepState.WAITING:
            insert_event(cursor, self.instance_pk, pk, now, StepEventType.CHILD_FINISHED)
        record = StepRecord.new(
            pk,
            step_id,
            StepType.CHILD,
            state,
            created_at,
            parent_pk=parent_pk,
            parent_step_id=parent_step_id,
        )
        record.child_instance_pk = child_pk
        record.result = result
        record.error_name = fields["error_name"]
        record.error_message = fields["error_message"]
        record.resolved_at = fields["resolved_at"]
        self._remember(record)
        return record


def _failure_name(outcome: Outcome) -> str:
    if outcome.status == WorkflowStatus.CANCELLED:
        return "WorkflowCancelledError"
    return "WorkflowFailedError"
