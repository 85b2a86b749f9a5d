"""Replay a recorded history against the code now registered, with no side effect.

A check replay runs the definition's ``execute()`` over an in-memory copy of the recorded
steps. Two things make it side-effect free by construction:

* its step store (:class:`ReplayStore`) holds only that copy: every recorded step returns
  its recorded outcome, and any write a tick would make (a new step, an attempt started,
  a sleep elapsed, a wait resolved) ends the replay there instead, because that is where the
  history ends;
* its execution (:class:`ReplayExecution`) never calls a run step's callback: a run step
  whose attempt is still in progress also ends the replay.

Whatever ``execute()`` itself does outside steps is user code: the callers run each replay
in a read-only transaction that is always rolled back (:mod:`django_workerflow.store.readonly`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from django.db import models

from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.engine.execution import Execution, error_message
from django_workerflow.exceptions import (
    DuplicateStepIdError,
    NondeterminismError,
    StepOutcomeError,
)
from django_workerflow.store.ledger import StepLedger
from django_workerflow.store.records import StepRecord, unreached_steps
from django_workerflow.store.steps import RecordedSteps
from django_workerflow.values import attributes, progress, storable
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.control_flow import Suspension
from django_workerflow.values.sealing import open_value
from django_workerflow.values.states import StepState, StepType

if TYPE_CHECKING:
    from datetime import datetime

    from django_workerflow.values.backoff import Backoff
    from django_workerflow.values.outcome import Outcome


class ReplayEnding(models.TextChoices):
    """How a check replay ended."""

    COMPLETED = "completed", "execute() returned"
    FAILED = "failed", "execute() raised the failure its history recorded"
    STOPPED = "stopped", "stopped where the history ends"


class ProblemKind(models.TextChoices):
    """What would break (or, for ``UNREACHED``, only warns) when the instance replays."""

    KIND_CHANGED = "kind_changed", "a step reached as another kind"
    DUPLICATE_STEP = "duplicate_step", "a duplicate step id"
    UNREGISTERED = "unregistered", "a version that is not registered"
    EXECUTE_RAISED = "execute_raised", "execute() raised outside a step"
    NEW_STEP = "new_step", "a new step reached where the history recorded another"
    UNREACHED = "unreached", "recorded steps no longer reached"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing a replay found; ``step_id`` names the step involved, if any."""

    kind: ProblemKind
    message: str
    step_id: str | None = None

    @property
    def breaks(self) -> bool:
        return self.kind != ProblemKind.UNREACHED

    def breaks_unless(self, *, allow_new_steps: bool) -> bool:
        """:attr:`breaks`, but a new step in place of a recorded one only warns when
        ``allow_new_steps`` says it is a step added there, not a rename."""
        if allow_new_steps and self.kind == ProblemKind.NEW_STEP:
            return False
        return self.breaks


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What one replay of a recorded history did."""

    key: str
    name: str
    version: str
    outcome: ReplayEnding | None
    steps_replayed: int = 0
    first_new_step: str | None = None
    unreached: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = field(default=())
    #: The recorded step that ``first_new_step`` takes the place of, if the replay found one.
    displaced_step: str | None = None

    @property
    def breaks(self) -> bool:
        """True when the code now registered would break this history."""
        return any(problem.breaks for problem in self.problems)

    def breaking(self, *, allow_new_steps: bool = False) -> list[Problem]:
        """The problems that break this history (see :meth:`Problem.breaks_unless`)."""
        return [p for p in self.problems if p.breaks_unless(allow_new_steps=allow_new_steps)]


class HistoryEnd(Suspension):
    """The replay reached a write: the recorded history ends here."""

    def __init__(self, step_id: str | None) -> None:
        super().__init__(step_id)
        self.step_id = step_id


class ReplayStore(RecordedSteps, StepLedger):
    """Recorded steps held in memory; a write ends the replay instead of happening.

    The reads are :class:`~django_workerflow.store.steps.RecordedSteps`'; every write of
    :class:`~django_workerflow.store.ledger.StepLedger` ends the replay (:meth:`_end`), and
    a write added to the protocol later must be added here, or mypy says so.
    """

    def __init__(self, records: Iterable[StepRecord]) -> None:
        super().__init__(instance_pk=0)
        self._by_id = {}
        self.first_new_step: str | None = None
        for record in records:
            self._remember(record)

    def load(self) -> dict[str, StepRecord]:
        # The records are given: nothing to read.
        assert self._by_id is not None
        return self._by_id

    def record_patch_marker(
        self, step_id: str, *, applied: bool, parent_step_id: str | None
    ) -> StepRecord:
        """Decide a ``patched()`` marker in memory: the replay goes on past it."""
        parent_pk = self.require(parent_step_id).pk if parent_step_id else None
        record = StepRecord.new(
            -len(self.steps) - 1,
            step_id,
            StepType.PATCH,
            StepState.SUCCEEDED,
            clock_now(),
            parent_pk=parent_pk,
            parent_step_id=parent_step_id,
        )
        record.result = applied
        self._remember(record)
        return record

    # A replay holds no success to write (StepStore.defer_success): flushing writes nothing.
    pending_success = None

    def flush(self) -> None:
        """Nothing held, nothing to write."""

    def report_progress(self, current: object, total: object, message: object) -> None:
        """Check the value as the real store does, and keep nothing: progress is not a
        step, so a changed ``set_progress()`` call is never drift."""
        progress.checked(current, total, message)

    def report_attributes(self, changes: dict[str, object]) -> None:
        """Check the changes as the real store does, and keep nothing: attributes are not
        steps, so a changed ``set_attributes()`` call is never drift."""
        attributes.checked(changes, what="set_attributes()")

    # Every write of the real store ends the replay at the step it would write.

    def mark_sleep_elapsed(self, step_id: str) -> NoReturn:
        self._end(step_id)

    def mark_wait_timed_out(self, step_id: str) -> NoReturn:
        self._end(step_id)

    def sleep_step(
        self, step_id: str, *, wake_at: datetime, parent_step_id: str | None
    ) -> NoReturn:
        self._end(step_id)

    def wait_step(
        self,
        step_id: str,
        *,
        event_name: str,
        timeout_at: datetime | None,
        parent_step_id: str | None,
    ) -> NoReturn:
        self._end(step_id)

        self._end(step_id)

        self._end(step_id)

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
    ) -> NoReturn:
        self._end(step_id)

    def wait_instance_step(self, step_id: str, *, parent_step_id: str | None, key: str) -> NoReturn:
        self._end(step_id)

    def awaited_outcome(self, record: StepRecord) -> NoReturn:
        self._end(record)

    def resolve_child_step(self, step_id: str, outcome: Outcome | None) -> NoReturn:
        self._end(step_id)

    def defer_success(self, step_id: str, attempt: int, result_json: str) -> NoReturn:
        self._end(step_id)

    def create_started_run_step(
        self, step_id: str, *, parent_step_id: str | None, max_attempts: int
    ) -> NoReturn:
        self._end(step_id)

    def mark_attempt_started(self, step_id: str, attempt: int) -> NoReturn:
        self._end(step_id)

    def mark_attempt_succeeded(self, step_id: str, attempt: int, result_json: str) -> NoReturn:
        self._end(step_id)

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
    ) -> NoReturn:
        self._end(step_id)

    def _end(self, step_id: Any = None, *args: Any, **kwargs: Any) -> NoReturn:
        step = step_id if isinstance(step_id, str) else None
        if self.first_new_step is None and step is not None and self.get(step) is None:
            self.first_new_step = step
        raise HistoryEnd(step)


class ReplayExecution(Execution):
    """An execution that never calls a run step's callback."""

    def _attempt(
        self, record: StepRecord, fn: Any, backoff: Any, atomic: bool, timeout: float | None
    ) -> Any:
        # An attempt in progress: its outcome is not in the history yet.
        raise HistoryEnd(record.step_id)


def replay_records(
    definition_class: type[WorkflowDefinition],
    *,
    key: str,
    input: Any,
    records: Iterable[StepRecord],
    recorded_error: tuple[str, str] | None = None,
) -> ReplayReport:
    """Replay ``records`` (an instance's recorded steps) against ``definition_class``.

    ``recorded_error`` is a failed instance's ``(error_name, error_message)``: ``execute()``
    raising that same error outside a step replays the recorded failure, which is no drift.
    """
    records = list(records)
    store = ReplayStore(records)
    execution = ReplayExecution(
        instance_key=key,
        store=store,
        deadline=math.inf,
        interrupted_suspects=set(),
    )
    definition = definition_class(key=key, input=open_value(input), execution=execution)
    outcome: ReplayEnding | None = None
    problems: list[Problem] = []
    try:
        definition.execute()
    except Suspension:
        outcome = ReplayEnding.STOPPED
    except Exception as exc:
        fatal = execution.fatal
        if fatal is not None:
            problems.append(_definition_problem(fatal))
        elif _is_recorded_failure(store, exc, recorded_error):
            outcome = ReplayEnding.FAILED
        else:
            problems.append(
                Problem(
                    ProblemKind.EXECUTE_RAISED,
                    f"Instance '{key}': execute() raised {error_message(exc)} outside a step "
                    "on replay. The code must replay its recorded history without error; "
                    "register a new version for a change that cannot.",
                )
            )
    else:
        if execution.fatal is not None:
            problems.append(_definition_problem(execution.fatal))
        else:
            outcome = ReplayEnding.STOPPED if execution.suspended else ReplayEnding.COMPLETED
    seen = execution.seen_step_ids
    unreached: tuple[str, ...] = ()
    displaced: list[str] = []
    if not problems:
        missed = unreached_steps(store.steps, seen)
        if store.first_new_step is not None:
            # The replay stopped at a new step. The recorded steps after the last one it
            # reached are where the history went instead: the first is the step the new one
            # takes the place of; the others are not judged (the tick would go on past the
            # new step and may reach them).
            order = {record.step_id: index for index, record in enumerate(records)}
            last_seen = max((order[step_id] for step_id in seen if step_id in order), default=-1)
            displaced = [step_id for step_id in missed if order.get(step_id, -1) > last_seen]
            missed = [step_id for step_id in missed if step_id not in displaced]
        if displaced:
            assert store.first_new_step is not None  # displaced is only found past a new step
            problems.append(_new_step_problem(key, store.first_new_step, displaced[0]))
        unreached = tuple(missed)
        if unreached:
            problems.append(_unreached_problem(key, unreached))
    return ReplayReport(
        key=key,
        name=definition_class.name,
        version=definition_class.version,
        outcome=outcome,
        steps_replayed=sum(1 for step_id in store.steps if step_id in seen),
        first_new_step=store.first_new_step,
        displaced_step=displaced[0] if displaced else None,
        unreached=unreached,
        problems=tuple(problems),
    )


def unregistered_problem(key: str, name: str, version: str, known: list[str]) -> Problem:
    listed = ", ".join(known) or "none"
    return Problem(
        ProblemKind.UNREGISTERED,
        f"Instance '{key}' runs {name!r} version {version!r}, which is not registered "
        f"(registered versions: {listed}). Keep that version's definition deployed until "
        "its instances finish.",
    )


def _definition_problem(fatal: Exception) -> Problem:
    kind = (
        ProblemKind.DUPLICATE_STEP
        if isinstance(fatal, DuplicateStepIdError)
        else ProblemKind.KIND_CHANGED
        if isinstance(fatal, NondeterminismError)
        else ProblemKind.EXECUTE_RAISED
    )
    return Problem(kind, str(fatal), step_id=_quoted_step(str(fatal)))


def _new_step_problem(key: str, new_step: str, recorded: str) -> Problem:
    return Problem(
        ProblemKind.NEW_STEP,
        f"Instance '{key}' reaches the new step '{new_step}' where its history recorded "
        f"'{recorded}': after the deploy '{new_step}' would run as if for the first time "
        f"(a renamed step runs its work again). Keep the step id '{recorded}', or register "
        "the change as a new version; if the step was added there and is no rename, accept "
        "it (check-replay --allow-new-steps, testing.replay(..., allow_new_steps=True)).",
        step_id=new_step,
    )


def _unreached_problem(key: str, unreached: tuple[str, ...]) -> Problem:
    names = ", ".join(f"'{step_id}'" for step_id in unreached)
    return Problem(
        ProblemKind.UNREACHED,
        f"Instance '{key}': recorded steps no longer reached on replay: {names}.",
        step_id=unreached[0],
    )


def _is_recorded_failure(
    store: ReplayStore, exc: Exception, recorded_error: tuple[str, str] | None
) -> bool:
    """True if ``exc`` is a failure the history recorded: a step's (recorded failed or
    timed out), or the instance's own, raised outside a step (same name and message)."""
    if isinstance(exc, StepOutcomeError) and exc.step_id:
        record = store.get(exc.step_id)
        if record is not None and record.state in (StepState.FAILED, StepState.TIMED_OUT):
            return True
    return recorded_error == (storable.error_name(exc), error_message(exc))


def _quoted_step(message: str) -> str | None:
    """The step id an engine message names ("... reached step 'charge' as ...")."""
    found = re.search(r"[Ss]tep(?: id)? '([^']*)'", message)
    return found.group(1) if found else None
