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
:mod:`django_workerflow.store.lease` states. The instance's alarm is the tick's to set when it
settles, so no step write touches it (except through a lease renewal).

Child steps: the child instance is created in the same fenced transaction that records
the step, so no replay, crash or second worker ever starts a second child for one step:
either both commit or neither does, and a replay finds the step. A waiting child step is
resolved by the parent's next pass once the awaited instance has finished (its finishing
transaction wakes the parent: :mod:`django_workerflow.runtime.finishing`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from django.db import connection, transaction

from django_workerflow.exceptions import StepStateError, WorkerflowError, WorkflowInputError
from django_workerflow.models import Step, StepEvent, WorkflowInstance
from django_workerflow.store import executor, sql
from django_workerflow.store.attributes import PendingAttributes
from django_workerflow.store.instance_rows import converted
from django_workerflow.store.lease import Lease
from django_workerflow.store.outcomes import read_outcomes
from django_workerflow.store.progress import PendingProgress
from django_workerflow.store.records import (
    STEP_FIELDS,
    UNSETTLED_STATES,
    StepRecord,
    name_parent,
    name_parents,
)
from django_workerflow.store.transactions import (
    HeldClaim,
    WriteTransaction,
    adapt,
    execute_plain_at,
    explain_refusal,
    fenced,
    insert_event,
    satisfy_wait,
    start_new_run_statement,
)
from django_workerflow.values import jsonvalue, storable
from django_workerflow.values.backoff import Backoff, backoff_failure, retry_delay
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.control_flow import ExecutionStopped
from django_workerflow.values.outcome import Outcome
from django_workerflow.values.states import (
    StepEventType,
    StepState,
    StepType,
    StopReason,
    WorkflowStatus,
)

if TYPE_CHECKING:
    from django_workerflow.definition.workflow import WorkflowDefinition


def read_step(pk: int, parent_step_id: str | None) -> StepRecord:
    """Read one step row afresh."""
    record = StepRecord(*Step.objects.values_list(*STEP_FIELDS).get(pk=pk))
    record.parent_step_id = parent_step_id
    return record


def read_steps(instance_pk: int) -> list[StepRecord]:
    """Every step of an instance, oldest first, with their parents' step ids."""
    with connection.cursor() as cursor:
        rows = executor.execute(cursor, "read_steps", {"instance": instance_pk}).fetchall()
    return name_parents([StepRecord(*converted(Step, STEP_FIELDS, row)) for row in rows])


def received_trace_contexts(step_pks: list[int]) -> list[str]:
    """The trace contexts stored with the events that satisfied these wait steps (those
    sent without a span have none). Read only by a traced tick, once per event."""
    found = []
    with connection.cursor() as cursor:
        for pk in step_pks:
            executor.execute(cursor, "received_trace_context", {"step": pk}, prepare=False)
            found += [text for (text,) in cursor.fetchall()]
    return found


class ChildStarter(Protocol):
    """``start()`` as a child step calls it: idempotent on ``key``, raising a
    :class:`WorkerflowError` for a start it refuses."""

    def __call__(
        self,
        definition: str | type[WorkflowDefinition],
        *,
        key: str | None,
        input: Any,
        version: str | None,
        parent_pk: int | None,
        detached: bool,
    ) -> WorkflowInstance: ...


@dataclass(frozen=True, slots=True)
class PendingSuccess:
    """A run step's success, recorded in memory and not yet written."""

    record: StepRecord
    attempt: int
    result_json: str


class RecordedSteps:
    """The steps of one instance as recorded, read in one query and kept up to date by the
    store's writes."""

    def __init__(self, instance_pk: int) -> None:
        self.instance_pk = instance_pk
        self._by_id: dict[str, StepRecord] | None = None
        self._by_pk: dict[int, StepRecord] = {}

    def load(self) -> dict[str, StepRecord]:
        """Read every step of the instance in one query, replacing what is cached."""
        self._by_id = {}
        self._by_pk = {}
        for record in read_steps(self.instance_pk):
            self._remember(record)
        return self._by_id

    def load_none(self) -> dict[str, StepRecord]:
        """Start from no recorded step, without a query: the caller knows there is none
        (the tick's claim read that in its own statement)."""
        self._by_id = {}
        self._by_pk = {}
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

    def interrupted_attempts(self, step_id: str, interrupted_name: str) -> int:
        """How many of ``step_id``'s latest failed attempts in a row were interrupted (each
        recorded as ``interrupted_name``: its worker process died): one query, run only when
        an interruption is found."""
        names = (
            StepEvent.objects.filter(
                step_id=self.require(step_id).pk, type=StepEventType.ATTEMPT_FAILED
            )
            .order_by("-attempt_number", "-id")
            .values_list("error_name", flat=True)
        )
        count = 0
        for name in names.iterator():
            if name != interrupted_name:
                break
            count += 1
        return count

    def _remember(self, record: StepRecord) -> None:
        if self._by_id is None:
            self._by_id = {}
        self._by_id[record.step_id] = record
        self._by_pk[record.pk] = record
        if record.parent_step_id is None:
            name_parent(record, self._step_id_of)

    def _step_id_of(self, pk: int) -> str | None:
        record = self._by_pk.get(pk)
        return record.step_id if record else None


class StepStore(RecordedSteps):
    """Reads and writes the steps of one instance, for the tick holding ``lease_token``
    (fenced as :mod:`django_workerflow.store.lease` states): run, sleep, wait and child
    steps. ``start_child`` is how the runtime starts an instance (``start()``): the tick
    hands it over, so the store never imports the runtime. ``lease_taken_at``: see
    :class:`~django_workerflow.store.lease.Lease`."""

    _outcomes: dict[int, Outcome] | None = None

    def __init__(
        self,
        instance_pk: int,
        *,
        lease_token: str,
        start_child: ChildStarter,
        progress: PendingProgress | None = None,
        lease_taken_at: float | None = None,
        attributes: PendingAttributes | None = None,
        held_claim: HeldClaim | None = None,
    ) -> None:
        super().__init__(instance_pk)
        self.lease = Lease(instance_pk, lease_token, taken_at=lease_taken_at)
        self.pending_success: PendingSuccess | None = None
        #: The tick's claim, still open: the first write commits it.
        self.held_claim: HeldClaim | None = held_claim
        self._start_child = start_child
        # Shared by the passes of one tick: what the row holds, and what to write next.
        self.progress = progress or PendingProgress(instance_pk, lease_token, None)
        self.attributes = attributes or PendingAttributes(instance_pk, lease_token, None)

    def report_progress(self, current: object, total: object, message: object) -> None:
        """Hold a ``set_progress()`` value for the next write (see :mod:`.progress`)."""
        self.progress.report(current, total, message)

    def report_attributes(self, changes: dict[str, object]) -> None:
        """Hold a ``set_attributes()`` call's changes for the next write (see
        :mod:`.attributes`)."""
        self.attributes.report(changes)

    # Every write's transaction: the held progress and attributes, if any, are written in it.

    @contextmanager
    def _fenced(self, now: datetime, *, require_running: bool) -> Iterator[Any]:
        with fenced(self.lease, now, require_running=require_running) as cursor:
            written = self.progress.write(cursor)
            attributes = self.attributes.write(cursor)
            yield cursor
        self.progress.written(written)
        self.attributes.written(attributes)
        self._commit_claim()

    def _hot_write(self, values: dict[str, Any]) -> AbstractContextManager[Any]:
        """The hot write (:class:`WriteTransaction` with ``values``), and the held progress
        written in it if there is any; the first write of a tick whose claim is held open
        commits it (:class:`~django_workerflow.store.transactions.HeldClaim`)."""
        if self.held_claim is not None:
            return self._hot_write_committing_claim(values)
        if self.progress.pending is None and self.attributes.pending is None:
            return WriteTransaction(values)  # the usual step: nothing wrapped around it
        return self._hot_write_with_progress(values)

    @contextmanager
    def _hot_write_committing_claim(self, values: dict[str, Any]) -> Iterator[Any]:
        """The tick's first write in the claim's transaction, then its commit: before the
        write's caller goes on (an attempt's callback starts only once its start and the
        claim are committed)."""
        held, self.held_claim = self.held_claim, None
        with self._hot_write(values) as cursor:
            yield cursor
        if held is not None:
            held.commit()

    def _commit_claim(self) -> None:
        """Commit a claim held open (:class:`HeldClaim`) with the write just done."""
        held, self.held_claim = self.held_claim, None
        if held is not None:
            held.commit()

    @contextmanager
    def _hot_write_with_progress(self, values: dict[str, Any]) -> Iterator[Any]:
        """A step write with progress to write: on PostgreSQL a transaction of two statements
        (one commit still), where a step write without progress is one statement."""
        grouped = connection.vendor == "postgresql"
        with transaction.atomic() if grouped else nullcontext(), WriteTransaction(values) as cursor:
            written = self.progress.write(cursor)
            attributes = self.attributes.write(cursor)
            yield cursor
        self.progress.written(written)
        self.attributes.written(attributes)

    # Sleep and wait steps: created waiting, resolved when due, satisfied by events ----

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
        with self._fenced(now, require_running=True) as cursor:
            values = sql.params(
                instance=self.instance_pk,
                step_id=step_id,
                type=type,
                parent=parent_pk,
                wake_at=adapt(wake_at),
                event_name=event_name,
                timeout_at=adapt(timeout_at),
            )
            execute_plain_at(cursor, "insert_step", values, now)
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
        with self._fenced(now, require_running=False) as cursor:
            execute_plain_at(cursor, "step_state", {"step": record.pk}, now)
            if cursor.fetchone()[0] != StepState.WAITING:
                updated = read_step(record.pk, record.parent_step_id)
                self._remember(updated)
                return updated
            self._claim_queued_event(cursor, record, now)
        return record

    def _resolve_waiting(self, step_id: str, state: str, event_type: str) -> StepRecord:
        record = self.require(step_id)
        now = clock_now()
        with self._fenced(now, require_running=False) as cursor:
            execute_plain_at(
                cursor, "resolve_waiting", sql.params(step=record.pk, state=state), now
            )
            if cursor.rowcount != 1:
                raise explain_refusal(self.instance_pk, step_id, StepState.WAITING, None, now)
            insert_event(cursor, self.instance_pk, record.pk, now, event_type)
        record.state = state
        record.resolved_at = now
        return record

    def _claim_queued_event(self, cursor: Any, record: StepRecord, now: datetime) -> bool:
        """Give the wait step the oldest unclaimed event of its name sent before its deadline
        (strictly: an event sent at the deadline finds the wait timed out)."""
        values = {
            "instance": self.instance_pk,
            "event_name": record.event_name,
            "deadline": adapt(record.timeout_at),
        }
        execute_plain_at(cursor, "oldest_queued_event", values, now)
        row = cursor.fetchone()
        if row is None:
            return False
        event_pk, payload_json = row
        satisfy_wait(cursor, self.instance_pk, record.pk, event_pk, payload_json, now)
        record.state = StepState.SATISFIED
        record.payload = jsonvalue.loads(payload_json)
        record.resolved_at = now
        return True

    # Child steps: start (or find) another instance and record the link, in one
    # transaction ---------------------------------------------------------------------

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
        now = clock_now()
        with self._fenced(now, require_running=True) as cursor:
            try:
                child = self._start_child(
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
        with self._fenced(now, require_running=True) as cursor:
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
        with self._fenced(now, require_running=False) as cursor:
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

    # Run steps -----------------------------------------------------------------------

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
        with self._hot_write(values) as cursor:
            name = start_new_run_statement(values["renew"])
            row = executor.execute(cursor, name, values).fetchone()
            if row is None:
                raise ExecutionStopped(self.lease.stop_reason(cursor))
        return int(row[0])

    def _succeed_and_start(
        self, pending: PendingSuccess, values: dict[str, Any], now: datetime
    ) -> int:
        """Record ``pending`` and start the new run step in one statement (PostgreSQL) or one
        IMMEDIATE transaction (SQLite), committed synchronously. The success lands even if
        the start is refused (paused, cancelled): ExecutionStopped is raised after it."""
        values.update(step=pending.record.pk, attempt=pending.attempt, result=pending.result_json)
        stopped: StopReason | None = None
        with self._hot_write(values) as cursor:
            postgresql = cursor.db.vendor == "postgresql"  # the proxy's reads cost calls
            if postgresql:
                name = (
                    "succeed_and_start_renewing" if values["renew"] else "succeed_and_start_checked"
                )
                recorded, new_pk = executor.execute(cursor, name, values).fetchone()
            else:
                recorded = self._succeed_sqlite(cursor, values, pending.record.pk, now)
                new_pk = None
            if recorded != 1:
                self._refused(cursor, pending.record.step_id, pending.attempt, now)
            if not postgresql:
                row = executor.execute(cursor, "start_new_run_sqlite", values).fetchone()
                new_pk = row[0] if row else None
            if new_pk is None:
                stopped = self.lease.stop_reason(cursor)
        if stopped is not None:
            raise ExecutionStopped(stopped)
        return int(new_pk)

    def _succeed_sqlite(
        self, cursor: Any, values: dict[str, Any], step_pk: int, now: datetime
    ) -> int:
        """SQLite: record the success whose parameters are ``values``, and its event unless
        its row keeps it (derived_attempt_events); return how many steps changed (0 or 1)."""
        row = executor.execute(cursor, "succeed_run", values).fetchone()
        if row is None:
            return 0
        if not row[0]:
            insert_event(
                cursor,
                self.instance_pk,
                step_pk,
                now,
                StepEventType.ATTEMPT_SUCCEEDED,
                attempt_number=values["attempt"],
                result=values["result"],
            )
        return 1

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
        with self._fenced(now, require_running=True) as cursor:
            values = sql.params(step=record.pk, attempt=attempt, previous=attempt - 1)
            execute_plain_at(cursor, "start_attempt", values, now)
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
        with self._hot_write(values) as cursor:
            if postgresql:
                recorded = executor.execute(cursor, "succeed_run_with_event", values).fetchone()[0]
            else:
                recorded = self._succeed_sqlite(cursor, values, record.pk, now)
            if recorded != 1:
                self._refused(cursor, step_id, attempt, now)
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
        with self._fenced(now, require_running=False) as cursor:
            values = sql.params(
                step=record.pk,
                attempt=attempt,
                state=state,
                error_name=error_name,
                error_message=error_message,
                next_attempt_at=adapt(next_attempt_at),
                resolved_at=adapt(resolved_at),
            )
            execute_plain_at(cursor, "fail_attempt", values, now)
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
        with self._fenced(now, require_running=True):
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


def _failure_name(outcome: Outcome) -> str:
    if outcome.status == WorkflowStatus.CANCELLED:
        return "WorkflowCancelledError"
    return "WorkflowFailedError"
