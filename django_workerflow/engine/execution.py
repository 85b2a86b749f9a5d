"""One replay of a definition's ``execute()``: what each step helper does when it is reached.

A recorded step returns (or raises) its recorded outcome without running again; a step
reached for the first time is created, and run steps execute their callback right away, so
a tick that replays once keeps going step after step until something suspends it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from django.db import transaction

from django_workerflow.engine.child_steps import ChildSteps
from django_workerflow.engine.failures import (
    INTERRUPTED_ERROR_NAME,
    INTERRUPTED_MESSAGE,
    REPLAYED_FAILURES,
    error_message,
    failed_step_ids,
    note_failed_steps,
    recorded_failure,
    recorded_name,
)
from django_workerflow.exceptions import (
    NonRetryableStepError,
    WaitStepTimedOutError,
    WorkflowInputError,
)
from django_workerflow.values import jsonvalue, storable
from django_workerflow.values.backoff import Backoff
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.control import ExecutionStopped, Suspension
from django_workerflow.values.states import StepState, StepType
from django_workerflow.values.tracebacks import format_user_traceback

__all__ = [
    "INTERRUPTED_ERROR_NAME",
    "INTERRUPTED_MESSAGE",
    "Execution",
    "SettledResult",
    "error_message",
]

if TYPE_CHECKING:
    from django_workerflow.store.records import StepRecord

# The logger operators already configure (docs/operations.md lists its messages).
logger = logging.getLogger("django_workerflow.runtime")


@dataclass(frozen=True, slots=True)
class SettledResult:
    """The outcome of one branch of :meth:`WorkflowDefinition.all_settled`."""

    ok: bool
    value: Any = None
    error: BaseException | None = None


class _UnserializableResult(Exception):
    """A run step's result cannot be serialised; leaves an atomic step's transaction so
    that its side effects roll back. ``failure`` is what the step records."""

    def __init__(self, failure: NonRetryableStepError) -> None:
        super().__init__(str(failure))
        self.failure = failure


class Execution(ChildSteps):
    """One replay pass: the definition's step helpers delegate here."""

    # run ------------------------------------------------------------------------------

    def run(
        self,
        step_id: str,
        fn: Callable[[], Any],
        *,
        max_attempts: int = 3,
        backoff: Backoff | None = None,
        atomic: bool = False,
    ) -> Any:
        self._reach(step_id)
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
            return self._attempt(record, fn, backoff, atomic)
        self._check_kind(record, StepType.RUN)
        if record.state == StepState.SUCCEEDED:
            return record.result
        if record.state == StepState.FAILED:
            raise recorded_failure(record)
        if record.state == StepState.RUNNING:
            if not self._was_interrupted(step_id):
                # Suspended by a child step in an earlier tick: the same attempt goes on.
                return self._attempt(record, fn, backoff, atomic)
            record = self._write(
                store.mark_attempt_failed,
                step_id,
                record.attempt_count,
                error_name=INTERRUPTED_ERROR_NAME,
                error_message=INTERRUPTED_MESSAGE,
                backoff=backoff,
            )
            if record.state == StepState.FAILED:
                raise recorded_failure(record)
        # pending: a first attempt not yet started, or a retry
        if record.next_attempt_at is not None and record.next_attempt_at > clock_now():
            self._suspend(record.next_attempt_at)
        self._boundary()
        record = self._write(store.mark_attempt_started, step_id, record.attempt_count + 1)
        return self._attempt(record, fn, backoff, atomic)

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
        self, record: StepRecord, fn: Callable[[], Any], backoff: Backoff | None, atomic: bool
    ) -> Any:
        self.parents.append(record.step_id)
        try:
            if atomic:
                self.atomic_step = record.step_id
                with transaction.atomic():
                    value = fn()
                    self.atomic_step = None
                    # Recorded inside the transaction, so fn's writes commit with it.
                    return self._record_success(record, value, atomic=True)
            value = fn()
        except _UnserializableResult as exc:
            self._record_failure(record, exc.failure, backoff, non_retryable=True)
        except Exception as exc:
            if self.fatal is not None:
                raise self.fatal from exc
            self._record_failure(
                record,
                exc,
                backoff,
                non_retryable=isinstance(exc, tuple(REPLAYED_FAILURES.values())),
            )
        finally:
            self.parents.pop()
            self.atomic_step = None
        try:
            return self._record_success(record, value)
        except _UnserializableResult as exc:
            self._record_failure(record, exc.failure, backoff, non_retryable=True)

    def _record_success(self, record: StepRecord, value: Any, *, atomic: bool = False) -> Any:
        """Serialise the result and record the attempt's success; return the recorded
        (JSON round-tripped) result. _UnserializableResult if it cannot be serialised."""
        step_id = record.step_id
        try:
            result_json = jsonvalue.dumps(value, what=f"The result of run step '{step_id}'")
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
        return recorded.result

    def _record_failure(
        self,
        record: StepRecord,
        exc: BaseException,
        backoff: Backoff | None,
        *,
        non_retryable: bool,
    ) -> NoReturn:
        """Record a failed attempt, then raise its outcome: a retry suspends, a final failure
        raises what every replay will raise."""
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
        _log_failed_attempt(self.instance_key, record, exc)
        if record.state == StepState.FAILED:
            raise recorded_failure(record) from exc
        self._suspend(record.next_attempt_at)

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
            self._suspend(record.wake_at)
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
        if record is None or record.state == StepState.WAITING:
            record = self._write(
                self.store.wait_step,
                step_id,
                event_name=event_name,
                timeout_at=timeout_at,
                parent_step_id=self._parent(),
            )
        if record.state == StepState.SATISFIED:
            return record.payload
        if record.state == StepState.WAITING:
            if record.timeout_at is None or record.timeout_at > clock_now():
                self._suspend(record.timeout_at)
            record = self._write(self.store.mark_wait_timed_out, step_id)
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
            except Exception as exc:
                if self.fatal is not None:
                    raise self.fatal from exc
                outcomes.append(SettledResult(ok=False, error=exc))
        return outcomes


def _log_failed_attempt(instance_key: str, record: StepRecord, exc: BaseException) -> None:
    logger.info(
        "step attempt failed key=%s step=%s attempt=%s error=%s retry=%s",
        instance_key,
        record.step_id,
        record.attempt_count,
        record.error_name,
        record.state != StepState.FAILED,
        exc_info=exc,
    )
