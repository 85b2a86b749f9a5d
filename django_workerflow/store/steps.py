"""Step bookkeeping: the durable state machine of run, sleep and wait steps.

This is the engine's hot path, so writes are the named statements of :mod:`.sql` through
Django's connection, one short transaction per transition, and every recorded step of an
instance is read in one query per pass and kept in memory. Each transition checks the
step's recorded state in its ``WHERE`` clause and explains a refusal only after the fact, so
the common case costs one statement per row touched.

A run step's success is held in memory (:meth:`StepStore.defer_success`) and written with
the next write of the pass: starting the next run step records it in the same statement and
commit; any other write, and the end of the pass, write it first (:meth:`StepStore.flush`).
So a step's outcome is durable before any later callback starts, before the instance
suspends, finishes or yields, and before anything outside the tick can read it; a crash in
between re-runs the step (at least once). An ``atomic=True`` step records its success in its
own transaction, with its callback's writes.

A store works for one tick and holds its lease: every write is fenced as
:mod:`django_workerflow.lease` states. The instance's alarm is the tick's to set when it
settles, so no step write touches it (except through a lease renewal).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from django_workerflow.models import Step
from django_workerflow.store import executor, sql
from django_workerflow.store.children import ChildStepStore
from django_workerflow.store.records import StepRecord
from django_workerflow.store.transactions import (
    adapt,
    execute,
    explain_refusal,
    fenced,
    hot_write,
    insert_event,
    start_new_run_statement,
)
from django_workerflow.values import jsonvalue
from django_workerflow.values.backoff import Backoff, backoff_failure, retry_delay
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.control import ExecutionStopped
from django_workerflow.values.states import StepEventType, StepState, StepType, StopReason


@dataclass(frozen=True, slots=True)
class PendingSuccess:
    """A run step's success, recorded in memory and not yet written."""

    record: StepRecord
    attempt: int
    result_json: str


class StepStore(ChildStepStore):
    """Reads and writes the steps of one instance, for the tick holding ``lease_token``:
    run steps here, sleep and wait steps in :class:`~.waiting.WaitingStepStore`, child
    steps in :class:`~.child_store.ChildStepStore`."""

    def __init__(self, instance_pk: int, *, lease_token: str) -> None:
        super().__init__(instance_pk, lease_token=lease_token)
        self.pending_success: PendingSuccess | None = None

    def defer_success(self, step_id: str, attempt: int, result_json: str) -> StepRecord:
        """running -> succeeded in memory; written by the next write or :meth:`flush`."""
        self.flush()
        record = self.require(step_id)
        self.pending_success = PendingSuccess(record, attempt, result_json)
        record.state = StepState.SUCCEEDED
        record.result = jsonvalue.loads(result_json)
        record.resolved_at = clock_now()
        return record

    def flush(self) -> None:
        """Write the success held in memory, if any, on its own."""
        pending = self.pending_success
        if pending is not None:
            self.pending_success = None
            self.mark_attempt_succeeded(
                pending.record.step_id, pending.attempt, pending.result_json
            )

    def create_started_run_step(
        self, step_id: str, *, parent_step_id: str | None, max_attempts: int
    ) -> StepRecord:
        """Create a run step with its first attempt already started, in one transaction,
        together with the success held in memory, if any.

        The instance must still be 'running': the start of an attempt is where a pause or a
        cancel takes effect (the held success is recorded all the same).
        """
        parent_pk = self.require(parent_step_id).pk if parent_step_id else None
        now = clock_now()
        values = self.lease.params(adapt, now)
        values.update(step_id=step_id, parent=parent_pk, max_attempts=max_attempts, now=adapt(now))
        pending, self.pending_success = self.pending_success, None
        if pending is not None:
            new_pk = self._succeed_and_start(pending, values, now)
        else:
            new_pk = self._start_new_run(values, now)
        record = StepRecord.new(
            new_pk,
            step_id,
            StepType.RUN,
            StepState.RUNNING,
            now,
            parent_pk=parent_pk,
            parent_step_id=parent_step_id,
            attempt_count=1,
            max_attempts=max_attempts,
        )
        self._remember(record)
        return record

    def _start_new_run(self, values: dict[str, Any], now: datetime) -> int:
        with hot_write(values) as cursor:
            executor.execute(cursor, start_new_run_statement(values["renew"]), values)
            row = cursor.fetchone()
            if row is None:
                raise ExecutionStopped(self.lease.stop_reason(cursor))
            if connection.vendor != "postgresql":
                insert_event(
                    cursor,
                    self.instance_pk,
                    row[0],
                    now,
                    StepEventType.ATTEMPT_STARTED,
                    attempt_number=1,
                )
        return int(row[0])

    def _succeed_and_start(
        self, pending: PendingSuccess, values: dict[str, Any], now: datetime
    ) -> int:
        """Record ``pending`` and start the new run step in one statement (PostgreSQL) or one
        IMMEDIATE transaction (SQLite), committed synchronously. The success lands even if
        the start is refused (paused, cancelled): ExecutionStopped is raised after it."""
        values.update(step=pending.record.pk, attempt=pending.attempt, result=pending.result_json)
        stopped: StopReason | None = None
        with hot_write(values) as cursor:
            if connection.vendor == "postgresql":
                name = (
                    "succeed_and_start_renewing" if values["renew"] else "succeed_and_start_checked"
                )
                executor.execute(cursor, name, values)
                recorded, new_pk = cursor.fetchone()
            else:
                executor.execute(cursor, "succeed_run", values)
                recorded, new_pk = cursor.rowcount, None
            if recorded != 1:
                self._refused(cursor, pending.record.step_id, pending.attempt, now)
            if connection.vendor != "postgresql":
                executor.execute(cursor, "start_new_run_sqlite", values)
                row = cursor.fetchone()
                new_pk = row[0] if row else None
                if new_pk is None:
                    insert_event(
                        cursor,
                        self.instance_pk,
                        pending.record.pk,
                        now,
                        StepEventType.ATTEMPT_SUCCEEDED,
                        attempt_number=pending.attempt,
                        result=pending.result_json,
                    )
                else:
                    executor.execute(
                        cursor, "insert_two_step_events", {**values, "new_step": new_pk}
                    )
            if new_pk is None:
                stopped = self.lease.stop_reason(cursor)
        if stopped is not None:
            raise ExecutionStopped(stopped)
        return int(new_pk)

    def _refused(self, cursor: object, step_id: str, attempt: int, now: datetime) -> None:
        """A success matched no row: the lease was taken over (and the attempt recorded as
        interrupted), or the step changed under a held lease."""
        if self.lease.stop_reason(cursor) == StopReason.LEASE_LOST:
            raise ExecutionStopped(StopReason.LEASE_LOST)
        raise explain_refusal(self.instance_pk, step_id, StepState.RUNNING, attempt, now)

    def mark_attempt_started(self, step_id: str, attempt: int) -> StepRecord:
        """pending -> running for attempt number ``attempt`` (the next one)."""
        record = self.require(step_id)
        now = clock_now()
        with fenced(self.lease, now, require_running=True) as cursor:
            values = sql.params(step=record.pk, attempt=attempt, previous=attempt - 1)
            execute(cursor, "start_attempt", values, now)
            if cursor.rowcount != 1:
                raise explain_refusal(
                    self.instance_pk, step_id, StepState.PENDING, attempt - 1, now
                )
            insert_event(
                cursor,
                self.instance_pk,
                record.pk,
                now,
                StepEventType.ATTEMPT_STARTED,
                attempt_number=attempt,
            )
        record.state = StepState.RUNNING
        record.attempt_count = attempt
        record.next_attempt_at = None
        return record

    def mark_attempt_succeeded(self, step_id: str, attempt: int, result_json: str) -> StepRecord:
        """running -> succeeded, storing the JSON text of the result."""
        record = self.require(step_id)
        now = clock_now()
        values = self.lease.params(adapt, now)
        values.update(step=record.pk, attempt=attempt, result=result_json, now=adapt(now))
        postgresql = connection.vendor == "postgresql"
        with hot_write(values) as cursor:
            executor.execute(
                cursor, "succeed_run_with_event" if postgresql else "succeed_run", values
            )
            recorded = cursor.fetchone()[0] if postgresql else cursor.rowcount
            if recorded != 1:
                self._refused(cursor, step_id, attempt, now)
            if not postgresql:
                insert_event(
                    cursor,
                    self.instance_pk,
                    record.pk,
                    now,
                    StepEventType.ATTEMPT_SUCCEEDED,
                    attempt_number=attempt,
                    result=result_json,
                )
        record.state = StepState.SUCCEEDED
        record.result = jsonvalue.loads(result_json)
        record.resolved_at = now
        return record

    def mark_attempt_failed(
        self,
        step_id: str,
        attempt: int,
        *,
        error_name: str,
        error_message: str,
        non_retryable: bool = False,
        backoff: Backoff | None = None,
        traceback: str = "",
    ) -> StepRecord:
        """running -> pending (retry later) or -> failed (non-retryable or out of attempts);
        the attempt's event keeps ``traceback``."""
        record = self.require(step_id)
        now = clock_now()
        retry = not non_retryable and attempt < (record.max_attempts or 1)
        next_attempt_at = None
        if retry:
            try:
                next_attempt_at = now + retry_delay(attempt, backoff)
            except Exception as exc:
                # A broken backoff must not leave the attempt unrecorded: it fails the step.
                retry = False
                error_name, error_message = backoff_failure(step_id, error_message, exc)
        state = StepState.PENDING if retry else StepState.FAILED
        resolved_at = None if retry else now
        with fenced(self.lease, now, require_running=False) as cursor:
            values = sql.params(
                step=record.pk,
                attempt=attempt,
                state=state,
                error_name=error_name,
                error_message=error_message,
                next_attempt_at=adapt(next_attempt_at),
                resolved_at=adapt(resolved_at),
            )
            execute(cursor, "fail_attempt", values, now)
            if cursor.rowcount != 1:
                raise explain_refusal(self.instance_pk, step_id, StepState.RUNNING, attempt, now)
            insert_event(
                cursor,
                self.instance_pk,
                record.pk,
                now,
                StepEventType.ATTEMPT_FAILED,
                attempt_number=attempt,
                error_name=error_name,
                error_message=error_message,
                next_attempt_at=next_attempt_at,
                traceback=traceback,
            )
        record.state = state
        record.error_name = error_name
        record.error_message = error_message
        record.next_attempt_at = next_attempt_at
        record.resolved_at = resolved_at
        return record

    def record_patch_marker(
        self, step_id: str, *, applied: bool, parent_step_id: str | None
    ) -> StepRecord:
        """Record the answer of a ``patched()`` call as a succeeded marker step."""
        parent_pk = self.require(parent_step_id).pk if parent_step_id else None
        now = clock_now()
        with fenced(self.lease, now, require_running=True):
            pk = Step.objects.create(
                instance_id=self.instance_pk,
                step_id=step_id,
                type=StepType.PATCH,
                state=StepState.SUCCEEDED,
                parent_id=parent_pk,
                result=applied,
                resolved_at=now,
                created_at=now,
            ).pk
        record = StepRecord.new(
            pk,
            step_id,
            StepType.PATCH,
            StepState.SUCCEEDED,
            now,
            parent_pk=parent_pk,
            parent_step_id=parent_step_id,
        )
        record.result = applied
        record.resolved_at = now
        self._remember(record)
        return record
