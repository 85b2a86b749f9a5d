"""Step bookkeeping: the durable state machine of run, sleep and wait steps.

This is the engine's hot path, so writes are the named statements of :mod:`.sql` through
Django's connection, one short transaction per transition, and every recorded step of an
instance is read in one query per pass and kept in memory. Each transition checks the
step's recorded state in its ``WHERE`` clause and explains a refusal only after the fact, so
the common case costs one statement per row touched.

A store works for one tick and holds its lease: every write is fenced as
:mod:`django_workerflow.lease` states. The instance's alarm is the tick's to set when it
settles, so no step write touches it (except through a lease renewal).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection

from . import jsonvalue, sql
from .backoff import Backoff, retry_delay
from .clock import now as clock_now
from .control import ExecutionStopped
from .exceptions import StepStateError
from .lease import Lease
from .records import StepRecord, read_step, read_steps
from .states import StepEventType, StepState, StepType, StopReason
from .writes import (
    adapt,
    execute,
    explain_refusal,
    fenced,
    hot_write,
    insert_event,
    satisfy_wait,
    start_new_run_statement,
)

# States in which a step still holds up its parent run step.
UNSETTLED_STATES = frozenset({StepState.PENDING, StepState.RUNNING, StepState.WAITING})


class StepStore:
    """Reads and writes the steps of one instance, for the tick holding ``lease_token``."""

    def __init__(self, instance_pk: int, *, lease_token: str) -> None:
        self.instance_pk = instance_pk
        self.lease = Lease(instance_pk, lease_token)
        self._by_id: dict[str, StepRecord] | None = None
        self._by_pk: dict[int, StepRecord] = {}

    # Reading ---------------------------------------------------------------------------

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

    # Run steps -------------------------------------------------------------------------

    def create_started_run_step(
        self, step_id: str, *, parent_step_id: str | None, max_attempts: int
    ) -> StepRecord:
        """Create a run step with its first attempt already started, in one transaction.

        The instance must still be 'running': the start of an attempt is where a pause or a
        cancel takes effect.
        """
        parent_pk = self.require(parent_step_id).pk if parent_step_id else None
        now = clock_now()
        values = self.lease.params(adapt, now)
        values.update(step_id=step_id, parent=parent_pk, max_attempts=max_attempts, now=adapt(now))
        with hot_write(values) as cursor:
            sql.execute(cursor, start_new_run_statement(values["renew"]), values)
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
        record = StepRecord.new(
            row[0],
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
            sql.execute(cursor, "succeed_run_with_event" if postgresql else "succeed_run", values)
            recorded = cursor.fetchone()[0] if postgresql else cursor.rowcount
            if recorded != 1:
                if self.lease.stop_reason(cursor) == StopReason.LEASE_LOST:
                    raise ExecutionStopped(StopReason.LEASE_LOST)
                raise explain_refusal(self.instance_pk, step_id, StepState.RUNNING, attempt, now)
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
    ) -> StepRecord:
        """running -> pending (retry later) or -> failed (non-retryable or out of attempts)."""
        record = self.require(step_id)
        now = clock_now()
        max_attempts = record.max_attempts or 1
        retry = not non_retryable and attempt < max_attempts
        next_attempt_at = None
        if retry:
            try:
                next_attempt_at = now + retry_delay(attempt, backoff)
            except Exception as exc:
                # A broken backoff must not leave the attempt unrecorded: it fails the step.
                retry = False
                error_name = "WorkflowInputError"
                error_message = (
                    f"WorkflowInputError: Run step '{step_id}' failed ({error_message}) and its "
                    f"backoff gave no usable delay: {exc}"
                )
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
            )
        record.state = state
        record.error_name = error_name
        record.error_message = error_message
        record.next_attempt_at = next_attempt_at
        record.resolved_at = resolved_at
        return record

    # Sleep and wait steps --------------------------------------------------------------

    def sleep_step(
        self, step_id: str, *, wake_at: datetime, parent_step_id: str | None
    ) -> StepRecord:
        """The recorded sleep step, created (waiting until ``wake_at``) on first reach."""
        record = self.get(step_id)
        if record is not None:
            return record
        return self._create_waiting(
            step_id, StepType.SLEEP, parent_step_id, StepEventType.SLEEP_WAITING, wake_at=wake_at
        )

    def wait_step(
        self,
        step_id: str,
        *,
        event_name: str,
        timeout_at: datetime | None,
        parent_step_id: str | None,
    ) -> StepRecord:
        """The recorded wait step, created on first reach; a waiting one is re-read.

        A wait step claims the oldest queued event of its name that arrived before its
        deadline. An existing step keeps its recorded timeout: the arguments only apply at
        creation.
        """
        record = self.get(step_id)
        if record is None:
            return self._create_waiting(
                step_id,
                StepType.WAIT,
                parent_step_id,
                StepEventType.WAIT_WAITING,
                event_name=event_name,
                timeout_at=timeout_at,
            )
        if record.state == StepState.WAITING and record.type == StepType.WAIT:
            return self._refresh_wait(record)
        return record

    def mark_sleep_elapsed(self, step_id: str) -> StepRecord:
        return self._resolve_waiting(step_id, StepState.ELAPSED, StepEventType.SLEEP_ELAPSED)

    def mark_wait_timed_out(self, step_id: str) -> StepRecord:
        return self._resolve_waiting(step_id, StepState.TIMED_OUT, StepEventType.WAIT_TIMED_OUT)

    def _create_waiting(
        self,
        step_id: str,
        type: str,
        parent_step_id: str | None,
        event_type: str,
        *,
        wake_at: datetime | None = None,
        event_name: str = "",
        timeout_at: datetime | None = None,
    ) -> StepRecord:
        parent_pk = self.require(parent_step_id).pk if parent_step_id else None
        now = clock_now()
        with fenced(self.lease, now, require_running=True) as cursor:
            values = sql.params(
                instance=self.instance_pk,
                step_id=step_id,
                type=type,
                parent=parent_pk,
                wake_at=adapt(wake_at),
                event_name=event_name,
                timeout_at=adapt(timeout_at),
            )
            execute(cursor, "insert_step", values, now)
            pk = cursor.fetchone()[0]
            record = StepRecord.new(
                pk,
                step_id,
                type,
                StepState.WAITING,
                now,
                parent_pk=parent_pk,
                parent_step_id=parent_step_id,
                wake_at=wake_at,
                event_name=event_name,
                timeout_at=timeout_at,
            )
            if type == StepType.SLEEP:
                insert_event(cursor, self.instance_pk, pk, now, event_type, wake_at=wake_at)
            else:
                insert_event(
                    cursor,
                    self.instance_pk,
                    pk,
                    now,
                    event_type,
                    event_name=event_name,
                    timeout_at=timeout_at,
                )
                self._claim_queued_event(cursor, record, now)
        self._remember(record)
        return record

    def _refresh_wait(self, record: StepRecord) -> StepRecord:
        """Re-read a waiting wait step (an event may have satisfied it meanwhile) and let it
        claim a queued event if none did."""
        now = clock_now()
        with fenced(self.lease, now, require_running=False) as cursor:
            execute(cursor, "step_state", {"step": record.pk}, now)
            if cursor.fetchone()[0] != StepState.WAITING:
                updated = read_step(record.pk, record.parent_step_id)
                self._remember(updated)
                return updated
            self._claim_queued_event(cursor, record, now)
        return record

    def _resolve_waiting(self, step_id: str, state: str, event_type: str) -> StepRecord:
        record = self.require(step_id)
        now = clock_now()
        with fenced(self.lease, now, require_running=False) as cursor:
            execute(cursor, "resolve_waiting", sql.params(step=record.pk, state=state), now)
            if cursor.rowcount != 1:
                raise explain_refusal(self.instance_pk, step_id, StepState.WAITING, None, now)
            insert_event(cursor, self.instance_pk, record.pk, now, event_type)
        record.state = state
        record.resolved_at = now
        return record

    def _claim_queued_event(self, cursor: Any, record: StepRecord, now: datetime) -> bool:
        """Give the wait step the oldest unclaimed event of its name sent before its deadline."""
        values = {
            "instance": self.instance_pk,
            "event_name": record.event_name,
            "deadline": adapt(record.timeout_at),
        }
        execute(cursor, "oldest_queued_event", values, now)
        row = cursor.fetchone()
        if row is None:
            return False
        event_pk, payload_json = row
        satisfy_wait(cursor, self.instance_pk, record.pk, event_pk, payload_json, now)
        record.state = StepState.SATISFIED
        record.payload = jsonvalue.loads(payload_json)
        record.resolved_at = now
        return True

    # Plumbing --------------------------------------------------------------------------

    def _remember(self, record: StepRecord) -> None:
        if self._by_id is None:
            self._by_id = {}
        self._by_id[record.step_id] = record
        self._by_pk[record.pk] = record
        if record.parent_pk is not None and record.parent_step_id is None:
            parent = self._by_pk.get(record.parent_pk)
            record.parent_step_id = parent.step_id if parent else None
