"""One replay pass of a definition's ``execute()``: what each step helper does when reached.

A recorded step returns (or raises) its recorded outcome without running again; a step
reached for the first time is created, and run steps execute their callback right away, so
a tick that replays once keeps going step after step until something suspends it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from django.db import DatabaseError, transaction

from django_workerflow import tracing
from django_workerflow.conf import settings
from django_workerflow.engine import step_timer
from django_workerflow.engine.failures import (
    INTERRUPTED_ERROR_NAME,
    INTERRUPTED_MESSAGE,
    REPLAYED_FAILURES,
    error_message,
    failed_step_ids,
    failure,
    instance_timed_out,
    note_failed_steps,
    recorded_failure,
    recorded_name,
    strip_name,
    worker_lost_message,
)
from django_workerflow.exceptions import (
    DuplicateStepIdError,
    NondeterminismError,
    NonRetryableStepError,
    ReplayError,
    StepTimeoutError,
    WaitStepTimedOutError,
    WorkerflowError,
    WorkerLostError,
    WorkflowDefinitionError,
    WorkflowInputError,
    WorkflowNotRegisteredError,
    WorkflowTimeoutError,
    WorkflowVersionConflictError,
)
from django_workerflow.process_counters import PROCESS_COUNTERS
from django_workerflow.store.records import unreached_steps
from django_workerflow.values import jsonvalue, storable
from django_workerflow.values.backoff import Backoff
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.control_flow import (
    ExecutionStopped,
    Suspension,
    TickAborted,
    passes_through,
)
from django_workerflow.values.sealing import Sealer, open_value
from django_workerflow.values.settled import SettledResult
from django_workerflow.values.states import (
    AttemptEnding,
    StepState,
    StepType,
    StopReason,
    WakeCause,
)
from django_workerflow.values.tracebacks import format_user_traceback

__all__ = [
    "INTERRUPTED_ERROR_NAME",
    "INTERRUPTED_MESSAGE",
    "Execution",
    "error_message",
]

if TYPE_CHECKING:
    from django_workerflow.definition.workflow import WorkflowDefinition
    from django_workerflow.store.ledger import StepLedger
    from django_workerflow.store.records import StepRecord

logger = logging.getLogger(__name__)


class _UnserializableResult(Exception):
    """A run step's result cannot be serialised; leaves an atomic step's transaction so
    that its side effects roll back. ``failure`` is what the step records."""

    def __init__(self, failure: NonRetryableStepError) -> None:
        super().__init__(str(failure))
        self.failure = failure


_Written = TypeVar("_Written")


def _inside(parent_step_id: str | None) -> str:
    return f"inside run step '{parent_step_id}'" if parent_step_id else "directly in execute()"


# Errors a refused start records on the step, raised again (same class) on every replay.
_START_FAILURES: dict[str, type[WorkerflowError]] = {
    cls.__name__: cls
    for cls in (WorkflowVersionConflictError, WorkflowInputError, WorkflowNotRegisteredError)
}


#: Marker steps' ids: ``patch:<change_id>``, apart from the ids users give their steps.
MARKER_PREFIX = "patch:"


def marker_step_id(change_id: str) -> str:
    """The step id of the marker recording ``change_id``'s answer."""
    jsonvalue.check_identifier(change_id, what="A patch change id", max_length=190)
    return f"{MARKER_PREFIX}{change_id}"


class Execution:
    """One replay pass of a definition's ``execute()``: what it has seen and decided so far
    (the steps reached, the due times of the suspended ones, why it stopped), and the step
    helpers the definition delegates to: run, sleep, wait, all, child steps, patched."""

    def __init__(
        self,
        *,
        instance_key: str,
        store: StepLedger,
        deadline: float,
        interrupted_suspects: set[str] | None = None,
        trace: tracing.TickTrace | None = None,
        definition_name: str = "",
        instance_deadline: datetime | None = None,
        instance_timeout: float | None = None,
        quiet_errors: bool = False,
        sealer: Sealer | None = None,
    ) -> None:
        self.instance_key = instance_key
        # Seals the sensitive values of run steps' results before they are written; the
        # values the definition gets back are opened (values/sealing.py).
        self.sealer = sealer or Sealer()
        # The definition names sensitive fields: a failed attempt's traceback, which may
        # quote one, is not logged (its masked text is in the admin and ``show``).
        self.quiet_errors = quiet_errors
        # The instance's timeout (its clock's deadline, on the engine's clock, and its budget
        # in seconds for the message): checked at every step reached and bounding the timer
        # of the outermost run step's attempt. None: no timeout, nothing checked.
        self.instance_deadline = instance_deadline
        self.instance_timeout = instance_timeout
        # The label of the attempts this pass counts (process_counters.PROCESS_COUNTERS).
        self.definition_name = definition_name
        self.store = store
        self.deadline = deadline
        # The tick's trace: spans of the attempts that run, events of sleeps and waits.
        self.trace = trace or tracing.OFF
        # Run steps that were 'running' when a crashed tick's lease was taken over; shared by
        # the passes of one tick, and emptied as each is settled.
        self.interrupted_suspects = (
            interrupted_suspects if interrupted_suspects is not None else set()
        )
        self.seen_step_ids: set[str] = set()
        self.parents: list[str] = []
        self.due_times: list[datetime | None] = []
        # What each due time is for, as the wake lag metric counts it (None: not counted).
        self.due_causes: list[WakeCause | None] = []
        self.suspended = False
        self.stop_reason: StopReason | None = None
        self.yielded = False
        self.attempts_started = 0
        # What fails the pass whatever the workflow catches: a broken definition, or the
        # instance's timeout.
        self.fatal: WorkflowDefinitionError | ReplayError | WorkflowTimeoutError | None = None
        self.atomic_step: str | None = None

    def next_due(self) -> datetime | None:
        """The earliest time at which a suspended step can make progress (None: an event)."""
        due = [when for when in self.due_times if when is not None]
        return min(due) if due else None

    def next_due_cause(self) -> WakeCause | None:
        """What the earliest due time is for (None: nothing the wake lag counts)."""
        due = [
            (when, cause)
            for when, cause in zip(self.due_times, self.due_causes, strict=True)
            if when is not None
        ]
        return min(due, key=lambda pair: pair[0])[1] if due else None

    def check_deadline(self) -> None:
        """Fail the pass with :class:`WorkflowTimeoutError` once the instance's deadline has
        come: at the start of a pass and at each step it reaches."""
        if self.instance_deadline is not None and clock_now() >= self.instance_deadline:
            self.fatal = self._timed_out()
            raise self.fatal

    def _timed_out(self) -> WorkflowTimeoutError:
        return instance_timed_out(self.instance_key, self.instance_timeout or 0.0)

    def _reach(self, step_id: str) -> None:
        if self.fatal is not None:
            raise self.fatal
        if self.instance_deadline is not None:
            self.check_deadline()
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

    def _suspend(self, due: datetime | None, cause: WakeCause | None = None) -> NoReturn:
        self.suspended = True
        self.due_times.append(due)
        self.due_causes.append(cause)
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

    def set_progress(self, current: object, total: object, message: object) -> None:
        """Report progress: held for the pass's next write (not a step: see
        :mod:`django_workerflow.values.progress`); WorkflowInputError for a bad value."""
        self.store.report_progress(current, total, message)

    def set_attributes(self, changes: dict[str, object]) -> None:
        """Set attributes: held for the pass's next write (not a step: see
        :mod:`django_workerflow.values.attributes`); WorkflowInputError for a bad one."""
        self.store.report_attributes(changes)

    # The pass's checks are above; the step helpers follow.

    # run ------------------------------------------------------------------------------

    def run(
        self,
        step_id: str,
        fn: Callable[[], Any],
        *,
        max_attempts: int = 3,
        backoff: Backoff | None = None,
        atomic: bool = False,
        timeout: float | timedelta | None = None,
    ) -> Any:
        self._reach(step_id)
        # The limit is checked on every reach, so a bad one fails even a recorded step.
        seconds = None if timeout is None else step_timer.timeout_seconds(timeout, step_id=step_id)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise WorkflowInputError(
                f"max_attempts of run step '{step_id}' must be a whole number >= 1, "
                f"not {max_attempts!r}."
            )
        if max_attempts > storable.MAX_INTEGER:
            raise WorkflowInputError(
                f"max_attempts of run step '{step_id}' is {max_attempts}, more than the limit "
                f"of {storable.MAX_INTEGER} (the largest count the database stores)."
            )
        if not callable(fn):
            raise WorkflowInputError(f"Run step '{step_id}' needs a callable, not {fn!r}.")
        store = self.store
        record = store.get(step_id)
        if record is None:
            self._boundary()
            record = self._write(
                store.create_started_run_step,
                step_id,
                parent_step_id=self._parent(),
                max_attempts=max_attempts,
                fuse=True,
            )
            PROCESS_COUNTERS.attempt_started(self.definition_name, StepType.RUN)
            return self._attempt(record, fn, backoff, atomic, seconds)
        self._check_kind(record, StepType.RUN)
        if record.state == StepState.SUCCEEDED:
            return open_value(record.result)
        if record.state == StepState.FAILED:
            raise recorded_failure(record)
        if record.state == StepState.RUNNING:
            if not self._was_interrupted(step_id):
                # Suspended by a child step in an earlier tick: the same attempt goes on.
                return self._attempt(record, fn, backoff, atomic, seconds)
            # A step whose attempts keep killing their worker must not loop for ever.
            interruptions = 1 + store.interrupted_attempts(step_id, INTERRUPTED_ERROR_NAME)
            lost = interruptions >= settings.MAX_INTERRUPTED_ATTEMPTS
            message = worker_lost_message(f"Run step '{step_id}'", interruptions)
            record = self._write(
                store.mark_attempt_failed,
                step_id,
                record.attempt_count,
                error_name=WorkerLostError.__name__ if lost else INTERRUPTED_ERROR_NAME,
                error_message=message if lost else INTERRUPTED_MESSAGE,
                non_retryable=lost,
                backoff=backoff,
                # No code raised it: the line a traceback ends with names its class.
                traceback=f"{WorkerLostError.__module__}.WorkerLostError: {message}\n"
                if lost
                else "",
            )
            PROCESS_COUNTERS.attempt_finished(
                self.definition_name, StepType.RUN, AttemptEnding.INTERRUPTED, None
            )
            if record.state == StepState.FAILED:
                raise recorded_failure(record)
        # pending: a first attempt not yet started, or a retry
        if record.next_attempt_at is not None and record.next_attempt_at > clock_now():
            self._suspend(record.next_attempt_at, WakeCause.RETRY)
        self._boundary()
        record = self._write(store.mark_attempt_started, step_id, record.attempt_count + 1)
        PROCESS_COUNTERS.attempt_started(self.definition_name, StepType.RUN)
        return self._attempt(record, fn, backoff, atomic, seconds)

    def _was_interrupted(self, step_id: str) -> bool:
        """A 'running' step was interrupted if the tick that ran it crashed (its lease was
        taken over) while its own code ran: no child step of it was still unsettled.

        After a clean tick a 'running' step is always a parent suspended by a child, even if
        that child has since been satisfied by an event.
        """
        if step_id not in self.interrupted_suspects:
            return False
        self.interrupted_suspects.discard(step_id)
        return not self.store.has_running_or_waiting_child_steps(step_id)

    def _attempt(
        self,
        record: StepRecord,
        fn: Callable[[], Any],
        backoff: Backoff | None,
        atomic: bool,
        timeout: float | None,
    ) -> Any:
        limit, expired = timeout, None
        if self.instance_deadline is not None and not self.parents:
            # The outermost attempt is bounded by the instance's deadline too (an inner
            # step runs within it), and raises the instance's error when that comes first.
            left = (self.instance_deadline - clock_now()).total_seconds()
            if limit is None or left < limit:
                limit, expired = max(left, 1e-6), self._timed_out
        if limit is not None:
            # Only a step with a limit pays for the timer.
            fn = partial(
                step_timer.run_limited, fn, step_id=record.step_id, seconds=limit, expired=expired
            )
        self.parents.append(record.step_id)
        # The attempt's duration, as the metric counts it, on the engine's clock (the test
        # harness's virtual time applies).
        started = clock_now()
        try:
            if atomic:
                self.atomic_step = record.step_id
                with transaction.atomic():
                    value = self._call(record, fn) if self.trace.recording else fn()
                    self.atomic_step = None
                    # Recorded inside the transaction, so fn's writes commit with it.
                    return self._record_success(record, value, started, atomic=True)
            # The attribute first: an untraced step (the usual one) makes no call for it.
            value = self._call(record, fn) if self.trace.recording else fn()
        except _UnserializableResult as exc:
            self._record_failure(record, exc.failure, backoff, started, non_retryable=True)
        except BaseException as exc:  # exit() or Ctrl-C in a callback fails its attempt too
            if passes_through(exc) or self._enclosing_timeout(exc, record.step_id):
                raise
            if self.fatal is not None:
                raise self.fatal from exc
            if isinstance(exc, WorkflowTimeoutError) and exc.key == self.instance_key:
                self._interrupted_by_deadline(record, exc, backoff, started)
            self._record_failure(
                record,
                exc,
                backoff,
                started,
                non_retryable=isinstance(exc, tuple(REPLAYED_FAILURES.values())),
            )
        finally:
            self.parents.pop()
            self.atomic_step = None
        try:
            return self._record_success(record, value, started)
        except _UnserializableResult as exc:
            self._record_failure(record, exc.failure, backoff, started, non_retryable=True)

    def _enclosing_timeout(self, exc: BaseException, step_id: str) -> bool:
        """Whether ``exc`` is the timeout of an enclosing run step, which fails that step's
        attempt, not this one's (this one goes on when the enclosing step runs again)."""
        return (
            isinstance(exc, StepTimeoutError)
            and exc.step_id != step_id
            and exc.step_id in self.parents
        )

    def _call(self, record: StepRecord, fn: Callable[[], Any]) -> Any:
        """Run an attempt's callback in its span (the tick is traced)."""
        span = self.trace.step(record.step_id, StepType.RUN, record.attempt_count)
        if span is None:
            return fn()
        with span:
            return fn()

    def _record_success(
        self, record: StepRecord, value: Any, started: datetime, *, atomic: bool = False
    ) -> Any:
        """Serialise the result and record the attempt's success (begun at ``started``);
        return the recorded (JSON round-tripped) result. _UnserializableResult if it cannot
        be serialised."""
        step_id = record.step_id
        try:
            result_json = jsonvalue.dumps(
                self.sealer.step(step_id, value), what=f"The result of run step '{step_id}'"
            )
        except WorkflowInputError as exc:
            failure = NonRetryableStepError(
                f"Run step '{step_id}' returned a value that cannot be durably serialized as "
                f"JSON: {exc.__cause__ or exc}"
            )
            raise _UnserializableResult(failure) from failure
        if atomic:
            # Inside the step's own transaction, so fn's writes commit with its success.
            recorded = self._write(
                self.store.mark_attempt_succeeded, step_id, record.attempt_count, result_json
            )
        else:
            # Held in memory and written with the next write (see store.StepStore).
            recorded = self._write(
                self.store.defer_success, step_id, record.attempt_count, result_json, fuse=True
            )
        PROCESS_COUNTERS.attempt_finished(
            self.definition_name,
            StepType.RUN,
            AttemptEnding.SUCCEEDED,
            (clock_now() - started).total_seconds(),
        )
        return open_value(recorded.result)

    def _interrupted_by_deadline(
        self,
        record: StepRecord,
        exc: WorkflowTimeoutError,
        backoff: Backoff | None,
        started: datetime,
    ) -> NoReturn:
        """The instance's deadline interrupted this attempt (its timer, or the check when
        the callback returned): the attempt is recorded as failed, as any failed attempt
        (retried after the instance's ``retry()``, which reopens the step if that was its
        last), and the pass fails with the instance's timeout, whatever the workflow
        catches."""
        self.fatal = exc
        note_failed_steps(exc, [record.step_id])
        self._note_failure(record, exc, backoff, started, non_retryable=False)
        raise exc

    def _record_failure(
        self,
        record: StepRecord,
        exc: BaseException,
        backoff: Backoff | None,
        started: datetime,
        *,
        non_retryable: bool,
    ) -> NoReturn:
        """Record a failed attempt (begun at ``started``), then raise its outcome: a retry
        suspends, a final failure raises what every replay will raise."""
        record = self._note_failure(record, exc, backoff, started, non_retryable=non_retryable)
        if record.state == StepState.FAILED:
            raise recorded_failure(record) from exc
        self._suspend(record.next_attempt_at, WakeCause.RETRY)

    def _note_failure(
        self,
        record: StepRecord,
        exc: BaseException,
        backoff: Backoff | None,
        started: datetime,
        *,
        non_retryable: bool,
    ) -> StepRecord:
        """Record a failed attempt (begun at ``started``) and return the step as it is now."""
        record = self._write(
            self.store.mark_attempt_failed,
            record.step_id,
            record.attempt_count,
            error_name=recorded_name(exc),
            error_message=error_message(exc),
            non_retryable=non_retryable,
            backoff=backoff,
            traceback=format_user_traceback(exc),
        )
        PROCESS_COUNTERS.attempt_finished(
            self.definition_name,
            StepType.RUN,
            AttemptEnding.FAILED,
            (clock_now() - started).total_seconds(),
        )
        _log_failed_attempt(self.instance_key, record, None if self.quiet_errors else exc)
        return record

    # sleep ----------------------------------------------------------------------------

    def sleep(self, step_id: str, duration: float | timedelta) -> None:
        """Sleep for ``duration``, measured from the step's first reach."""
        record = self._recorded(step_id)
        if record is None:
            delta = jsonvalue.to_timedelta(duration, what=f"The duration of sleep step '{step_id}'")
            when = clock_now() + delta
        else:
            when = record.wake_at or clock_now()
        self.sleep_until(step_id, when)

    def sleep_until(self, step_id: str, when: datetime) -> None:
        self._reach(step_id)
        jsonvalue.check_aware(when, what=f"The wake time of sleep step '{step_id}'")
        record = self.store.get(step_id)
        if record is None:
            record = self._write(
                self.store.sleep_step, step_id, wake_at=when, parent_step_id=self._parent()
            )
        self._check_kind(record, StepType.SLEEP)
        if record.state == StepState.ELAPSED:
            return
        if record.wake_at is not None and record.wake_at > clock_now():
            self.trace.slept(step_id, record.wake_at)
            self._suspend(record.wake_at, WakeCause.SLEEP)
        self._write(self.store.mark_sleep_elapsed, step_id)

    # wait -----------------------------------------------------------------------------

    def wait_deadline(self, step_id: str, timeout: float | timedelta) -> datetime | None:
        """The deadline of a wait given ``timeout``: counted from the step's first reach."""
        record = self._recorded(step_id)
        if record is not None:
            return record.timeout_at
        delta = jsonvalue.to_timedelta(timeout, what=f"The timeout of wait step '{step_id}'")
        return clock_now() + delta

    def wait(self, step_id: str, event_name: str, timeout_at: datetime | None) -> Any:
        self._reach(step_id)
        jsonvalue.check_identifier(event_name, what=f"The event name of wait step '{step_id}'")
        record = self.store.get(step_id)
        if record is not None:
            self._check_kind(record, StepType.WAIT)
        fresh = record is None or record.state == StepState.WAITING
        if fresh:
            record = self._write(
                self.store.wait_step,
                step_id,
                event_name=event_name,
                timeout_at=timeout_at,
                parent_step_id=self._parent(),
            )
        assert record is not None  # created or re-read above
        if record.state == StepState.SATISFIED:
            self.trace.satisfied(
                record.pk, step_id, record.event_name, record.resolved_at, fresh=fresh
            )
            return open_value(record.payload)
        if record.state == StepState.WAITING:
            if record.timeout_at is None or record.timeout_at > clock_now():
                self.trace.waiting(step_id, record.event_name, record.timeout_at)
                self._suspend(record.timeout_at)
            record = self._write(self.store.mark_wait_timed_out, step_id)
            _log_wait_timed_out(self.instance_key, record)
        raise WaitStepTimedOutError(
            f"Wait step '{step_id}' timed out at {record.timeout_at.isoformat()} before event "
            f"'{record.event_name}' arrived."
            if record.timeout_at
            else f"Wait step '{step_id}' timed out.",
            step_id=step_id,
        )

    # all / all_settled -----------------------------------------------------------------

    def all(self, branches: tuple[Callable[[], Any], ...]) -> list[Any]:
        outcomes = self._run_branches(branches)
        errors = [
            outcome.error
            for outcome in outcomes
            if outcome is not None and not outcome.ok and outcome.error is not None
        ]
        if errors:
            # The first failure is raised; it names every failed branch's steps, so that one
            # retry reopens them all.
            note_failed_steps(errors[0], [s for error in errors for s in failed_step_ids(error)])
            raise errors[0]
        settled = [outcome for outcome in outcomes if outcome is not None]
        if len(settled) < len(outcomes):
            raise Suspension()
        return [outcome.value for outcome in settled]

    def all_settled(self, branches: tuple[Callable[[], Any], ...]) -> list[SettledResult]:
        outcomes = self._run_branches(branches)
        settled = [outcome for outcome in outcomes if outcome is not None]
        if len(settled) < len(outcomes):
            raise Suspension()
        return settled

    def _run_branches(self, branches: tuple[Callable[[], Any], ...]) -> list[SettledResult | None]:
        """Let every branch progress as far as it can; None marks a suspended branch."""
        for branch in branches:
            if not callable(branch):
                raise WorkflowInputError(
                    f"Each branch must be a zero-argument callable, not {branch!r}."
                )
        outcomes: list[SettledResult | None] = []
        for branch in branches:
            try:
                outcomes.append(SettledResult(ok=True, value=branch()))
            except ExecutionStopped:
                raise
            except Suspension:
                outcomes.append(None)
            except BaseException as exc:  # as a step's callback: see _attempt
                if passes_through(exc):
                    raise
                if self.fatal is not None:
                    raise self.fatal from exc
                outcomes.append(SettledResult(ok=False, error=exc))
        return outcomes

    # child steps ------------------------------------------------------------------------

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
        return open_value(record.result)

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

    # patched ---------------------------------------------------------------------------

    def patched(self, change_id: str) -> bool:
        """The recorded answer of ``change_id`` for this instance, decided on first reach.

        The answer is recorded as a marker step, so every later replay gives the same one.
        Reached without a recorded marker, the replay looks for recorded steps it has not
        reached yet in this pass: there are some only if the instance already ran beyond
        this point under the old code (False: the old branch replays its recorded steps),
        and none where the replay stands at the end of the history, where new code runs
        for the first time (True). An absent marker therefore never fails a replay. The
        limit that follows: inside ``all()``/``all_settled()`` branches, steps of a later
        branch recorded before this branch reached ``patched()`` count as "past this
        point"; decide patches before a fan-out, or in a step of its own.
        """
        step_id = marker_step_id(change_id)
        record = self.store.get(step_id)
        if record is not None and step_id in self.seen_step_ids:
            # Asked again in the same pass: the same answer, not a duplicate step.
            return bool(record.result)
        self._reach(step_id)
        if record is not None:
            self._check_kind(record, StepType.PATCH)
            return bool(record.result)
        applied = not unreached_steps(self.store.steps, self.seen_step_ids)
        record = self._write(
            self.store.record_patch_marker,
            step_id,
            applied=applied,
            parent_step_id=self._parent(),
        )
        return bool(record.result)


def _log_failed_attempt(instance_key: str, record: StepRecord, exc: BaseException | None) -> None:
    """One line per failed attempt, without its traceback: a retry is expected, and a step
    that failed for good fails its instance with the step's error chained (``workflow
    failed`` logs that traceback) or is handled by ``execute()``. The traceback is DEBUG
    detail here, and kept on the attempt's step event; ``exc`` None (a definition with
    sensitive fields) logs none."""
    if record.state == StepState.FAILED:
        logger.info(
            "step failed key=%s step=%s attempt=%s error=%s",
            instance_key,
            record.step_id,
            record.attempt_count,
            record.error_name,
        )
    else:
        logger.info(
            "step retry scheduled key=%s step=%s attempt=%s error=%s retry_at=%s",
            instance_key,
            record.step_id,
            record.attempt_count,
            record.error_name,
            record.next_attempt_at.isoformat() if record.next_attempt_at else "-",
        )
    if exc is not None:
        logger.debug(
            "step attempt traceback key=%s step=%s attempt=%s",
            instance_key,
            record.step_id,
            record.attempt_count,
            exc_info=exc,
        )


def _log_wait_timed_out(instance_key: str, record: StepRecord) -> None:
    logger.info(
        "wait timed out key=%s step=%s event=%s timeout_at=%s",
        instance_key,
        record.step_id,
        record.event_name,
        record.timeout_at.isoformat() if record.timeout_at else "-",
    )


def _reopened_start(record: StepRecord) -> bool:
    """A child step whose start (or lookup) was refused, reopened by a retry: the pass
    starts (or looks up) the child again, in the same step row."""
    return record.type == StepType.CHILD and record.state == StepState.PENDING
