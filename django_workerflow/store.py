"""Step bookkeeping: the durable state machine of run, sleep and wait steps.

This is the engine's hot path, so writes are plain SQL through Django's connection, one
short transaction per transition, and every recorded step of an instance is read in one
query per tick and kept in memory. Each transition checks the step's recorded state in its
``WHERE`` clause and explains a refusal only after the fact, so the common case costs one
statement per row touched.

When the store works for a tick it holds the instance's lease token: every write transaction
first re-checks that lease on the instance row (fencing), which also takes the row lock that
serialises it with events and control operations.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from django.db import connections, transaction

from . import jsonvalue
from .backoff import Backoff, retry_delay
from .clock import now as clock_now
from .conf import settings
from .control import ExecutionStopped
from .exceptions import StepStateError
from .hotsql import hot_sql, prepared
from .models import (
    InboundEvent,
    Step,
    StepEvent,
    StepEventType,
    StepState,
    StepType,
    WorkflowInstance,
    WorkflowStatus,
)

INSTANCE_TABLE = WorkflowInstance._meta.db_table
STEP_TABLE = Step._meta.db_table
STEP_EVENT_TABLE = StepEvent._meta.db_table
INBOUND_TABLE = InboundEvent._meta.db_table

# The hot statements already prepared on each PostgreSQL connection (they live as long as
# the server session, and survive rollbacks).
_prepared_on: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

# States in which a step still holds up its parent run step.
UNSETTLED_STATES = frozenset({StepState.PENDING, StepState.RUNNING, StepState.WAITING})

_STEP_FIELDS = (
    "id",
    "step_id",
    "type",
    "state",
    "parent_id",
    "attempt_count",
    "max_attempts",
    "next_attempt_at",
    "result",
    "error_name",
    "error_message",
    "wake_at",
    "event_name",
    "timeout_at",
    "payload",
    "resolved_at",
    "created_at",
)


@dataclass(slots=True)
class StepRecord:
    """The in-memory copy of one ``Step`` row."""

    pk: int
    step_id: str
    type: str
    state: str
    parent_pk: int | None
    attempt_count: int
    max_attempts: int | None
    next_attempt_at: datetime | None
    result: Any
    error_name: str
    error_message: str
    wake_at: datetime | None
    event_name: str
    timeout_at: datetime | None
    payload: Any
    resolved_at: datetime | None
    created_at: datetime
    parent_step_id: str | None = None

    @classmethod
    def new(
        cls,
        pk: int,
        step_id: str,
        type: str,
        state: str,
        created_at: datetime,
        *,
        parent_pk: int | None,
        parent_step_id: str | None,
        attempt_count: int = 0,
        max_attempts: int | None = None,
        wake_at: datetime | None = None,
        event_name: str = "",
        timeout_at: datetime | None = None,
    ) -> StepRecord:
        """The record of a step just inserted: no outcome, no error, no payload yet."""
        return cls(
            pk=pk,
            step_id=step_id,
            type=type,
            state=state,
            parent_pk=parent_pk,
            attempt_count=attempt_count,
            max_attempts=max_attempts,
            next_attempt_at=None,
            result=None,
            error_name="",
            error_message="",
            wake_at=wake_at,
            event_name=event_name,
            timeout_at=timeout_at,
            payload=None,
            resolved_at=None,
            created_at=created_at,
            parent_step_id=parent_step_id,
        )


class StepStore:
    """Reads and writes the steps of one instance.

    ``lease_token`` is the tick's lease; without one (tests, maintenance) writes are not
    fenced and arm the instance's alarm themselves.
    """

    def __init__(
        self, instance_pk: int, *, lease_token: str | None = None, using: str = "default"
    ) -> None:
        self.instance_pk = instance_pk
        self.lease_token = lease_token
        self.using = using
        self._by_id: dict[str, StepRecord] | None = None
        self._by_pk: dict[int, StepRecord] = {}
        # The hot path renews the lease every quarter lease, not on every write.
        self._renew_due = 0.0

    # Reading ---------------------------------------------------------------------------

    def load(self) -> dict[str, StepRecord]:
        """Read every step of the instance in one query, replacing what is cached."""
        rows = (
            Step.objects.using(self.using)
            .filter(instance_id=self.instance_pk)
            .order_by("created_at", "id")
            .values_list(*_STEP_FIELDS)
        )
        self._by_id = {}
        self._by_pk = {}
        for row in rows:
            self._remember(StepRecord(*row))
        for record in self._by_pk.values():
            if record.parent_pk is not None:
                record.parent_step_id = self._by_pk[record.parent_pk].step_id
        return self._by_id

    def reload(self) -> dict[str, StepRecord]:
        return self.load()

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

    # Creating --------------------------------------------------------------------------

    def get_or_create_step(
        self,
        step_id: str,
        type: str,
        *,
        parent_step_id: str | None = None,
        max_attempts: int | None = None,
        wake_at: datetime | None = None,
        event_name: str = "",
        timeout_at: datetime | None = None,
        require_running: bool = False,
    ) -> StepRecord:
        """Return the recorded step, creating it on first reach.

        A new sleep or wait arms the instance's alarm for its due time; a new wait first
        claims the oldest queued event of its name that arrived before its deadline. An
        existing step keeps its recorded wake and timeout times: the arguments only apply
        at creation.
        """
        record = self.get(step_id)
        if record is not None:
            if record.state == StepState.WAITING:
                if record.type == StepType.WAIT:
                    return self.refresh_wait(step_id)
                self._arm_alarm_if_future(record.wake_at)
            return record
        if type == StepType.RUN:
            return self._insert_step(
                step_id,
                type,
                StepState.PENDING,
                parent_step_id=parent_step_id,
                max_attempts=max_attempts or 3,
                require_running=require_running,
            )
        if type == StepType.SLEEP:
            return self._insert_step(
                step_id,
                type,
                StepState.WAITING,
                parent_step_id=parent_step_id,
                wake_at=wake_at,
                event=(StepEventType.SLEEP_WAITING, {"wake_at": wake_at}),
                alarm=wake_at,
                require_running=require_running,
            )
        if type == StepType.WAIT:
            return self._insert_step(
                step_id,
                type,
                StepState.WAITING,
                parent_step_id=parent_step_id,
                event_name=event_name,
                timeout_at=timeout_at,
                event=(
                    StepEventType.WAIT_WAITING,
                    {"event_name": event_name, "timeout_at": timeout_at},
                ),
                alarm=timeout_at,
                claim_queued_event=True,
                require_running=require_running,
            )
        raise ValueError(f"Unknown step type {type!r}.")

    def create_started_run_step(
        self, step_id: str, *, parent_step_id: str | None, max_attempts: int
    ) -> StepRecord:
        """Create a run step with its first attempt already started, in one transaction.

        The instance must still be 'running': the start of an attempt is where a pause or a
        cancel takes effect.
        """
        if self.lease_token is None:
            return self._insert_step(
                step_id,
                StepType.RUN,
                StepState.RUNNING,
                parent_step_id=parent_step_id,
                max_attempts=max_attempts,
                attempt_count=1,
                event=(StepEventType.ATTEMPT_STARTED, {"attempt_number": 1}),
                require_running=True,
            )
        parent_pk = self.require(parent_step_id).pk if parent_step_id else None
        now = clock_now()
        params = {
            **self._fence_params(now),
            "step_id": step_id,
            "parent": parent_pk,
            "max_attempts": max_attempts,
            "now": self._adapt(now),
        }
        with self._hot_write(params) as cursor:
            statement = "start_new_run"
            if self.vendor == "postgresql" and not params["renew"]:
                statement = "start_new_run_checked"
            self._execute_hot(cursor, statement, params)
            row = cursor.fetchone()
            if row is None:
                raise self._fence_failure(cursor)
            if self.vendor != "postgresql":
                self._insert_events(
                    cursor, row[0], now, [(StepEventType.ATTEMPT_STARTED, {"attempt_number": 1})]
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

    def _insert_step(
        self,
        step_id: str,
        type: str,
        state: str,
        *,
        parent_step_id: str | None,
        max_attempts: int | None = None,
        attempt_count: int = 0,
        wake_at: datetime | None = None,
        event_name: str = "",
        timeout_at: datetime | None = None,
        event: tuple[str, dict[str, Any]] | None = None,
        alarm: datetime | None = None,
        claim_queued_event: bool = False,
        require_running: bool = False,
    ) -> StepRecord:
        parent_pk = self.require(parent_step_id).pk if parent_step_id else None
        now = clock_now()
        adapt = self._adapt
        with transaction.atomic(using=self.using), self._cursor() as cursor:
            self._fence(cursor, now, require_running=require_running)
            cursor.execute(
                f"INSERT INTO {STEP_TABLE} (instance_id, step_id, type, state, parent_id, "
                "attempt_count, max_attempts, error_name, error_message, wake_at, event_name, "
                "timeout_at, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, '', '', %s, %s, "
                "%s, %s) RETURNING id",
                [
                    self.instance_pk,
                    step_id,
                    type,
                    state,
                    parent_pk,
                    attempt_count,
                    max_attempts,
                    adapt(wake_at),
                    event_name,
                    adapt(timeout_at),
                    adapt(now),
                ],
            )
            pk = cursor.fetchone()[0]
            record = StepRecord.new(
                pk,
                step_id,
                type,
                state,
                now,
                parent_pk=parent_pk,
                parent_step_id=parent_step_id,
                attempt_count=attempt_count,
                max_attempts=max_attempts,
                wake_at=wake_at,
                event_name=event_name,
                timeout_at=timeout_at,
            )
            if event is not None:
                self._insert_events(cursor, pk, now, [event])
            self._arm_alarm(cursor, alarm)
            if claim_queued_event:
                self._claim_queued_event(cursor, record, now)
        self._remember(record)
        return record

    # Run steps -------------------------------------------------------------------------

    def mark_attempt_started(self, step_id: str, attempt: int) -> StepRecord:
        """pending -> running for attempt number ``attempt`` (the next one)."""
        record = self.require(step_id)
        now = clock_now()
        with transaction.atomic(using=self.using), self._cursor() as cursor:
            self._fence(cursor, now, require_running=self.lease_token is not None)
            cursor.execute(
                f"UPDATE {STEP_TABLE} SET state = %s, attempt_count = %s "
                "WHERE id = %s AND state = %s AND attempt_count = %s "
                "AND (next_attempt_at IS NULL OR next_attempt_at <= %s)",
                [
                    StepState.RUNNING,
                    attempt,
                    record.pk,
                    StepState.PENDING,
                    attempt - 1,
                    self._adapt(now),
                ],
            )
            if cursor.rowcount != 1:
                raise self._explain_refusal(step_id, StepState.PENDING, attempt - 1, now)
            self._insert_events(
                cursor,
                record.pk,
                now,
                [(StepEventType.ATTEMPT_STARTED, {"attempt_number": attempt})],
            )
        record.state = StepState.RUNNING
        record.attempt_count = attempt
        record.next_attempt_at = None
        return record

    def mark_attempt_succeeded(self, step_id: str, attempt: int, result_json: str) -> StepRecord:
        """running -> succeeded, storing the JSON text of the result."""
        record = self.require(step_id)
        now = clock_now()
        params = {
            **self._fence_params(now),
            "step": record.pk,
            "attempt": attempt,
            "result": result_json,
            "now": self._adapt(now),
        }
        with self._hot_write(params) as cursor:
            self._execute_hot(cursor, "succeed_run", params)
            recorded = cursor.fetchone()[0] if self.vendor == "postgresql" else cursor.rowcount
            if recorded != 1:
                if not self._lease_held(cursor):
                    raise ExecutionStopped("lease_lost")
                raise self._explain_refusal(step_id, StepState.RUNNING, attempt, now)
            if self.vendor != "postgresql":
                event = {"attempt_number": attempt, "result": result_json}
                self._insert_events(
                    cursor, record.pk, now, [(StepEventType.ATTEMPT_SUCCEEDED, event)]
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
        with transaction.atomic(using=self.using), self._cursor() as cursor:
            self._fence(cursor, now)
            cursor.execute(
                f"UPDATE {STEP_TABLE} SET state = %s, error_name = %s, error_message = %s, "
                "next_attempt_at = %s, resolved_at = %s "
                "WHERE id = %s AND state = %s AND attempt_count = %s",
                [
                    state,
                    error_name,
                    error_message,
                    self._adapt(next_attempt_at),
                    None if retry else self._adapt(now),
                    record.pk,
                    StepState.RUNNING,
                    attempt,
                ],
            )
            if cursor.rowcount != 1:
                raise self._explain_refusal(step_id, StepState.RUNNING, attempt, now)
            self._insert_events(
                cursor,
                record.pk,
                now,
                [
                    (
                        StepEventType.ATTEMPT_FAILED,
                        {
                            "attempt_number": attempt,
                            "error_name": error_name,
                            "error_message": error_message,
                            "next_attempt_at": next_attempt_at,
                        },
                    )
                ],
            )
            self._arm_alarm(cursor, next_attempt_at)
        record.state = state
        record.error_name = error_name
        record.error_message = error_message
        record.next_attempt_at = next_attempt_at
        record.resolved_at = None if retry else now
        return record

    # Sleep and wait steps --------------------------------------------------------------

    def mark_sleep_elapsed(self, step_id: str) -> StepRecord:
        return self._resolve_waiting(step_id, StepState.ELAPSED, StepEventType.SLEEP_ELAPSED)

    def mark_wait_timed_out(self, step_id: str) -> StepRecord:
        return self._resolve_waiting(step_id, StepState.TIMED_OUT, StepEventType.WAIT_TIMED_OUT)

    def refresh_wait(self, step_id: str) -> StepRecord:
        """Re-read a waiting wait step (an event may have satisfied it meanwhile) and let it
        claim a queued event if none did."""
        record = self.require(step_id)
        now = clock_now()
        with transaction.atomic(using=self.using), self._cursor() as cursor:
            self._fence(cursor, now)
            cursor.execute(f"SELECT state FROM {STEP_TABLE} WHERE id = %s", [record.pk])
            if cursor.fetchone()[0] != StepState.WAITING:
                fresh = Step.objects.using(self.using).values_list(*_STEP_FIELDS).get(pk=record.pk)
                updated = StepRecord(*fresh, parent_step_id=record.parent_step_id)
                self._remember(updated)
                return updated
            if not self._claim_queued_event(cursor, record, now):
                self._arm_alarm(cursor, record.timeout_at, only_future=True, now=now)
        return record

    def _resolve_waiting(self, step_id: str, state: str, event_type: str) -> StepRecord:
        record = self.require(step_id)
        now = clock_now()
        with transaction.atomic(using=self.using), self._cursor() as cursor:
            self._fence(cursor, now)
            cursor.execute(
                f"UPDATE {STEP_TABLE} SET state = %s, resolved_at = %s "
                "WHERE id = %s AND state = %s",
                [state, self._adapt(now), record.pk, StepState.WAITING],
            )
            if cursor.rowcount != 1:
                raise self._explain_refusal(step_id, StepState.WAITING, None, now)
            self._insert_events(cursor, record.pk, now, [(event_type, {})])
        record.state = state
        record.resolved_at = now
        return record

    def _claim_queued_event(self, cursor: Any, record: StepRecord, now: datetime) -> bool:
        """Give the wait step the oldest unclaimed event of its name sent before its deadline."""
        sql = (
            f"SELECT id, payload FROM {INBOUND_TABLE} WHERE instance_id = %s AND event_name = %s "
            "AND claimed_at IS NULL"
        )
        params: list[Any] = [self.instance_pk, record.event_name]
        if record.timeout_at is not None:
            sql += " AND created_at <= %s"
            params.append(self._adapt(record.timeout_at))
        cursor.execute(sql + " ORDER BY created_at, id LIMIT 1", params)
        row = cursor.fetchone()
        if row is None:
            return False
        event_pk, payload_json = row
        satisfy_wait(cursor, self.using, record.pk, self.instance_pk, event_pk, payload_json, now)
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

    @cached_property
    def _connection(self) -> Any:
        return connections[self.using]

    def _cursor(self) -> Any:
        return self._connection.cursor()

    def _adapt(self, value: datetime | None) -> Any:
        return self._connection.ops.adapt_datetimefield_value(value)

    @cached_property
    def vendor(self) -> str:
        return self._connection.vendor

    def _fence_params(self, now: datetime) -> dict[str, Any]:
        """Lease check (and renewal, when due) parameters of the hot statements."""
        renew = self.lease_token is not None and time.monotonic() >= self._renew_due
        expires = self._adapt(now + timedelta(seconds=settings.LEASE_SECONDS))
        if renew:
            self._renew_due = time.monotonic() + settings.LEASE_SECONDS / 4
        return {
            "instance": self.instance_pk,
            "token": self.lease_token,
            "running": WorkflowStatus.RUNNING,
            "expires": expires,
            "renew": renew,
        }

    @contextmanager
    def _hot_write(self, params: dict[str, Any]) -> Iterator[Any]:
        """PostgreSQL: one self-contained statement, no explicit transaction needed (it is
        atomic on its own). SQLite: a short IMMEDIATE transaction around two statements, and
        a third when the lease is due for renewal."""
        if self.vendor == "postgresql":
            with self._cursor() as cursor:
                yield cursor
            return
        connection = self._connection
        if connection.in_atomic_block:
            with transaction.atomic(using=self.using), self._cursor() as cursor:
                if params["renew"]:
                    cursor.execute(hot_sql(self.vendor, "renew_lease"), params)
                yield cursor
            return
        # Outside any atomic block no on-commit hook can be pending, so the transaction is
        # plain SQL: Django's savepoint and autocommit bookkeeping cost a third of a step.
        with connection.cursor() as cursor:
            cursor.execute("BEGIN IMMEDIATE")
            try:
                if params["renew"]:
                    cursor.execute(hot_sql(self.vendor, "renew_lease"), params)
                yield cursor
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT")

    def _execute_hot(self, cursor: Any, name: str, params: dict[str, Any]) -> None:
        """Run a hot statement; on PostgreSQL as a server-side prepared statement (planned
        once per connection) unless WORKERFLOW_PREPARED_STATEMENTS is off."""
        if self.vendor != "postgresql" or not settings.PREPARED_STATEMENTS:
            cursor.execute(hot_sql(self.vendor, name), params)
            return
        statement, prepare, names = prepared(name)
        raw = connections[self.using].connection
        done = _prepared_on.setdefault(raw, set())
        if statement not in done:
            cursor.execute(prepare)
            done.add(statement)
        placeholders = ", ".join(["%s"] * len(names))
        cursor.execute(f"EXECUTE {statement}({placeholders})", [params[n] for n in names])

    def _lease_held(self, cursor: Any) -> bool:
        cursor.execute(
            f"SELECT lease_token FROM {INSTANCE_TABLE} WHERE id = %s", [self.instance_pk]
        )
        row = cursor.fetchone()
        return row is not None and row[0] == self.lease_token

    def _fence_failure(self, cursor: Any) -> ExecutionStopped:
        """Why a fenced write that requires a running instance matched nothing."""
        return ExecutionStopped("not_running" if self._lease_held(cursor) else "lease_lost")

    def _fence(self, cursor: Any, now: datetime, *, require_running: bool = False) -> None:
        """Check the lease (and status) on the instance row, renew the lease, lock the row."""
        if self.lease_token is None:
            return
        expires = self._adapt(now + timedelta(seconds=settings.LEASE_SECONDS))
        sql = (
            f"UPDATE {INSTANCE_TABLE} SET lease_expires_at = %s, "
            "alarm_at = CASE WHEN status = %s THEN %s ELSE alarm_at END "
            "WHERE id = %s AND lease_token = %s"
        )
        params: list[Any] = [
            expires,
            WorkflowStatus.RUNNING,
            expires,
            self.instance_pk,
            self.lease_token,
        ]
        if require_running:
            sql += " AND status = %s"
            params.append(WorkflowStatus.RUNNING)
        cursor.execute(sql, params)
        if cursor.rowcount == 1:
            return
        cursor.execute(
            f"SELECT lease_token FROM {INSTANCE_TABLE} WHERE id = %s", [self.instance_pk]
        )
        row = cursor.fetchone()
        if row is None or row[0] != self.lease_token:
            raise ExecutionStopped("lease_lost")
        raise ExecutionStopped("not_running")

    def _arm_alarm(
        self,
        cursor: Any,
        when: datetime | None,
        *,
        only_future: bool = False,
        now: datetime | None = None,
    ) -> None:
        """Bring the alarm forward to ``when`` (never later); ticks set the exact value."""
        if when is None or self.lease_token is not None:
            return
        if only_future and now is not None and when <= now:
            return
        value = self._adapt(when)
        cursor.execute(
            f"UPDATE {INSTANCE_TABLE} SET alarm_at = %s WHERE id = %s AND status IN (%s, %s) "
            "AND (alarm_at IS NULL OR alarm_at > %s)",
            [value, self.instance_pk, WorkflowStatus.PENDING, WorkflowStatus.RUNNING, value],
        )

    def _arm_alarm_if_future(self, when: datetime | None) -> None:
        if when is None or self.lease_token is not None or when <= clock_now():
            return
        with transaction.atomic(using=self.using), self._cursor() as cursor:
            self._arm_alarm(cursor, when)

    def _insert_events(
        self, cursor: Any, step_pk: int, now: datetime, events: list[tuple[str, dict[str, Any]]]
    ) -> None:
        insert_step_events(cursor, self.using, self.instance_pk, step_pk, now, events)

    def _explain_refusal(
        self, step_id: str, expected_state: str, expected_attempt: int | None, now: datetime
    ) -> StepStateError:
        row = (
            Step.objects.using(self.using)
            .filter(instance_id=self.instance_pk, step_id=step_id)
            .values("state", "attempt_count", "next_attempt_at")
            .first()
        )
        if row is None:
            return StepStateError(f"Step '{step_id}' not found in this workflow instance.")
        if row["state"] != expected_state:
            return StepStateError(
                f"Step '{step_id}' is in the wrong state: Expected '{expected_state}' but got "
                f"{row['state']}."
            )
        if expected_attempt is not None and row["attempt_count"] != expected_attempt:
            return StepStateError(
                f"Unexpected attempt count for step '{step_id}': Expected {expected_attempt} "
                f"but got {row['attempt_count']}."
            )
        if row["next_attempt_at"] is not None and row["next_attempt_at"] > now:
            return StepStateError(
                f"Step '{step_id}' cannot start before its next attempt at "
                f"{row['next_attempt_at'].isoformat()}."
            )
        return StepStateError(f"Step '{step_id}' changed concurrently; try again.")


_STEP_EVENT_COLUMNS = (
    "attempt_number",
    "result",
    "error_name",
    "error_message",
    "next_attempt_at",
    "wake_at",
    "event_name",
    "timeout_at",
    "payload",
)
_DATETIME_COLUMNS = frozenset({"next_attempt_at", "wake_at", "timeout_at"})


def insert_step_events(
    cursor: Any,
    using: str,
    instance_pk: int,
    step_pk: int,
    now: datetime,
    events: list[tuple[str, dict[str, Any]]],
) -> None:
    """Append step events in one multi-row INSERT."""
    adapt = connections[using].ops.adapt_datetimefield_value
    recorded_at = adapt(now)
    placeholders = []
    params: list[Any] = []
    for event_type, fields in events:
        placeholders.append("(" + ", ".join(["%s"] * (4 + len(_STEP_EVENT_COLUMNS))) + ")")
        params += [instance_pk, step_pk, event_type, recorded_at]
        for column in _STEP_EVENT_COLUMNS:
            value = fields.get(column)
            if column in _DATETIME_COLUMNS:
                value = adapt(value)
            elif value is None and column in ("error_name", "error_message", "event_name"):
                value = ""
            params.append(value)
    cursor.execute(
        f"INSERT INTO {STEP_EVENT_TABLE} (instance_id, step_id, type, recorded_at, "
        + ", ".join(_STEP_EVENT_COLUMNS)
        + ") VALUES "
        + ", ".join(placeholders),
        params,
    )


def satisfy_wait(
    cursor: Any,
    using: str,
    step_pk: int,
    instance_pk: int,
    event_pk: int,
    payload_json: str | None,
    now: datetime,
) -> None:
    """Mark a waiting wait step satisfied by an inbound event, and the event claimed by it."""
    adapt = connections[using].ops.adapt_datetimefield_value
    cursor.execute(
        f"UPDATE {STEP_TABLE} SET state = %s, payload = %s, resolved_at = %s WHERE id = %s",
        [StepState.SATISFIED, payload_json, adapt(now), step_pk],
    )
    cursor.execute(
        f"UPDATE {INBOUND_TABLE} SET claimed_by_id = %s, claimed_at = %s WHERE id = %s",
        [step_pk, adapt(now), event_pk],
    )
    insert_step_events(
        cursor,
        using,
        instance_pk,
        step_pk,
        now,
        [(StepEventType.WAIT_SATISFIED, {"payload": payload_json})],
    )
