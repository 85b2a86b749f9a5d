"""The tick: claim an instance, replay ``execute()`` and keep executing, then settle.

A tick claims the instance under its row lock and takes its lease
(:mod:`django_workerflow.store.lease`), replays the definition once from the recorded steps and
keeps executing new ones, each step write committing on its own (:mod:`django_workerflow.store`).
The pass ends by completing, failing or suspending; settling it is the tick's last transaction: it
sets the instance's single alarm and releases the lease. A pass that suspends with work already due
replays again at once.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, transaction

from django_workerflow import registry, tracing
from django_workerflow.conf import settings
from django_workerflow.definition import sensitive
from django_workerflow.definition.drift import unregistered_hint
from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.engine.execution import Execution, error_message
from django_workerflow.engine.failures import failed_step_ids
from django_workerflow.exceptions import WorkflowInputError, WorkflowTimeoutError
from django_workerflow.models import ACTIVE_STATUSES, WorkflowInstance, WorkflowStatus
from django_workerflow.process_counters import PROCESS_COUNTERS
from django_workerflow.runtime import finishing, starting
from django_workerflow.runtime.flow import admission
from django_workerflow.store import instance_rows, interrupted, lease
from django_workerflow.store.attributes import PendingAttributes
from django_workerflow.store.progress import PendingProgress
from django_workerflow.store.records import unreached_steps
from django_workerflow.store.steps import StepStore, received_trace_contexts
from django_workerflow.store.transactions import (
    ClaimUndone,
    HeldClaim,
    keeps_claim_open,
    write_pending,
)
from django_workerflow.values import jsonvalue, storable
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.control_flow import ExecutionStopped, Suspension, passes_through
from django_workerflow.values.sealing import open_value
from django_workerflow.values.states import PassEnding, StopReason, TickEnding, WakeCause
from django_workerflow.values.tracebacks import format_user_traceback
from django_workerflow.workers import bells
from django_workerflow.workers.lease_renewal import LeaseRenewal

logger = logging.getLogger(__name__)

# How long an instance whose definition is not registered waits before it is looked at again.
UNREGISTERED_RETRY = timedelta(minutes=1)
# A pass that suspends with work already due replays at once; this many passes in one tick
# means something keeps waking it, so the worker yields to others.
MAX_REPLAYS_PER_TICK = 100


@dataclass(frozen=True, slots=True)
class TickReport:
    """What a tick did, and the alarm it left."""

    outcome: TickEnding
    alarm_at: datetime | None = None
    replays: int = 0


@dataclass(slots=True)
class PassReport:
    """How one replay pass ended, and what settling it needs."""

    outcome: PassEnding
    result_json: str | None = None
    error_name: str = ""
    error_message: str = ""
    error_traceback: str = ""
    error_step_id: str = ""
    other_error_step_ids: list[str] | None = None
    exception: BaseException | None = None
    due: datetime | None = None
    due_cause: WakeCause | None = None
    stop_reason: StopReason | None = None
    yielded: bool = False
    unreached: list[str] | None = field(default=None)


def tick(instance_pk: int, *, renew_lease: bool = False, bell: int | None = None) -> TickReport:
    """Execute the instance as far as it can go now. Safe to call at any time, any number
    of times, from any worker: an instance that is not due, not active, or leased by a live
    worker is left as it is (a live lease gets a request for one more pass).

    ``renew_lease`` renews the lease from the renewal thread while callbacks run (workers
    use it; it needs the tick to run outside any transaction). ``bell``: the id of the
    django-q2 bell this tick answers, deleted in the settle's commit if the tick finishes
    the instance (:mod:`django_workerflow.workers.handled_bell`).

    With OpenTelemetry, a tick that claims the instance is a ``workerflow.tick`` span
    (:mod:`django_workerflow.tracing`), current while it runs; a tick that finds nothing
    to do makes none.
    """
    # The tick's duration, as the metric counts it, on the engine's clock (the harness's).
    started = clock_now()
    token = uuid.uuid4().hex
    # Before the claim: the step writes' first lease renewal is due a quarter lease later.
    taken_at = time.monotonic()
    # PostgreSQL, outside any transaction: the claim stays open until the tick's first write
    # commits it with that write (the first attempt's start, usually).
    held = HeldClaim() if keeps_claim_open() else None
    try:
        claimed = _claim(instance_pk, token, held)
    except BaseException as error:
        if held is not None:
            held.close(error)
        raise
    if isinstance(claimed, TickReport) and held is not None:
        held.commit()  # nothing to do: the claim's read (and a re-arm, a deferral) commit
        held = None
    # A queued instance's rate-limit bell rang: admission runs with its row released.
    if (
        isinstance(claimed, TickReport)
        and claimed.outcome == TickEnding.QUEUED
        and admission.admit_queued_instance(instance_pk, clock_now())
    ):
        claimed = _claim(instance_pk, token)
    if isinstance(claimed, TickReport):
        return claimed
    failure: BaseException | None = None
    try:
        return _traced_tick(claimed, token, taken_at, renew_lease, bell, held, started)
    except BaseException as error:
        failure = error
        raise
    finally:
        if held is not None:
            held.close(failure)


def _traced_tick(
    claimed: Claimed,
    token: str,
    taken_at: float,
    renew_lease: bool,
    bell: int | None,
    held: HeldClaim | None,
    started: datetime,
) -> TickReport:
    """Execute a claimed instance in its trace, with the lease renewed if asked."""
    instance, definition_class, recovering, woken_at, woken_for, unrecorded = claimed
    if woken_for is not None:
        cause, due, now = woken_for
        PROCESS_COUNTERS.woke(instance.definition_name, cause, (now - due).total_seconds())
    traced = tracing.tick_trace(
        instance.definition_name,
        instance.definition_version,
        instance.key,
        instance.trace_context,
        woken_at,
        quiet_errors=bool(definition_class.sensitive),
    )
    try:
        with traced, LeaseRenewal(instance.pk, token) if renew_lease else nullcontext():
            return _execute(
                instance,
                definition_class,
                token,
                (taken_at, recovering, unrecorded, bell, held),
                traced,
            )
    finally:
        PROCESS_COUNTERS.tick_finished(
            instance.definition_name, (clock_now() - started).total_seconds()
        )


#: What a claimed tick was woken for: the cause, its due time and the claim's time.
WokenFor = tuple[WakeCause, datetime, datetime]
#: A claimed instance: the row, its definition, whether the lease was taken over, when a wake
#: made it due, what it was woken for, and whether it is known to have no step recorded.
Claimed = tuple[
    WorkflowInstance, type[WorkflowDefinition], bool, datetime | None, WokenFor | None, bool
]


def recheck_unregistered(**_: Any) -> int:
    """django-q2's ``post_spawn``: the instances an older worker deferred because it lacked
    their definition (it started before the code, or the TASKS, that define it) are due at
    once when this worker has it, not at their re-check up to a minute later. Answers how
    many were made due."""
    now = clock_now()
    made_due = 0
    try:
        deferred = list(
            WorkflowInstance.objects.deferred_unregistered(now, now + UNREGISTERED_RETRY)
        )
        for pk, name, version in deferred:
            if registry.lookup(name, version) is None:
                continue
            with transaction.atomic():
                if WorkflowInstance.objects.recheck_unregistered(pk, now):
                    bells.arm(pk, now)
                    made_due += 1
    except DatabaseError:  # the minute's re-check still comes
        logger.warning("re-check of deferred instances failed", exc_info=True)
    if made_due:
        logger.info("deferred instances due now that their definitions are here count=%s", made_due)
    return made_due


def _claim(instance_pk: int, token: str, held: HeldClaim | None = None) -> TickReport | Claimed:
    """Lock the instance and take its lease, or say why this tick has nothing to do. The
    fourth item says when a wake made the instance due (None: nothing woke it), for the
    tick's trace to tell the events it receives (:class:`~django_workerflow.tracing.TickTrace`); the
    fifth, what the tick was woken for, for the wake lag metric (:func:`_woken_for`); the
    last, that the first replay has no step to read (see :func:`_unrecorded`). With
    ``held``, the claim runs in that open transaction.

    On PostgreSQL the read and the lease are one statement (:func:`_claim_at_once`); a claim
    it took that the tick refuses is rolled back, and the claim is made as before."""
    if instance_rows.one_statement():
        claimed = _claim_at_once(instance_pk, token, held)
        if claimed is not None:
            return claimed
    with nullcontext() if held is not None else transaction.atomic():
        found = instance_rows.read_for_claim(instance_pk)
        if found is None:
            return TickReport(TickEnding.MISSING)
        return _decide(found, token, clock_now())


def _claim_at_once(
    instance_pk: int, token: str, held: HeldClaim | None
) -> TickReport | Claimed | None:
    """The claim's read and its lease in one statement, the lease taken where every check
    SQL can make holds; the checks are made again here on the row as read (and the
    definition looked up). None: the statement took a lease the tick refuses, now rolled
    back (``held`` holds a fresh transaction)."""
    now = clock_now()
    try:
        with nullcontext() if held is not None else transaction.atomic():
            found = instance_rows.claim(instance_pk, token, now)
            if found is None:
                return TickReport(TickEnding.MISSING)
            return _decide(found, token, now)
    except ClaimUndone:
        if held is not None:
            held.undo()
        return None


def _decide(found: instance_rows.ClaimRead, token: str, now: datetime) -> TickReport | Claimed:
    """The claim's checks on the locked row as read, and the lease taken (or, taken by the
    claim's statement, noted). Raises :class:`ClaimUndone` where the statement took a lease
    the tick refuses (the definition is not registered here)."""
    instance = found.instance
    ending = _unclaimable(instance, found.definition_paused, now)
    if ending is not None:
        if found.claimed:
            raise ClaimUndone  # the statement and these checks disagree: claim as before
        if ending == TickEnding.BUSY and instance.found_leased():
            assert instance.alarm_at is not None  # the lease's expiry, found due
            bells.arm(instance.pk, instance.alarm_at)
        return TickReport(ending, alarm_at=instance.alarm_at)
    definition_class = registry.lookup(instance.definition_name, instance.definition_version)
    if definition_class is None:
        if found.claimed:
            raise ClaimUndone
        logger.warning(
            "definition not registered key=%s definition=%s version=%s: the instance "
            "waits untouched until a worker has it; %s",
            instance.key,
            instance.definition_name,
            instance.definition_version,
            unregistered_hint(instance),
        )
        retry_at = now + UNREGISTERED_RETRY
        instance.defer(retry_at)
        bells.arm(instance.pk, retry_at)
        return TickReport(TickEnding.UNREGISTERED, alarm_at=instance.alarm_at)
    # The time of the wake that made it due (an event's, maybe), before the claim.
    woken_at = instance.updated_at if instance.wake_requested else None
    # Before the claim too, which sets the alarm (and clears its cause).
    woken_for = _woken_for(instance, now)
    unrecorded = _unrecorded(instance, found.has_steps)
    # A lease still set here has expired: the tick that held it died mid-work.
    if found.claimed:
        recovering = instance.lease_token is not None
        instance_rows.mark_claimed(instance, token, now)
    else:
        recovering = lease.claim(instance, token, now)
    if recovering:
        logger.warning("taking over an expired lease key=%s", instance.key)
    return instance, definition_class, recovering, woken_at, woken_for, unrecorded


def _unclaimable(
    instance: WorkflowInstance, definition_paused: bool, now: datetime
) -> TickEnding | None:
    """Why the locked instance is not claimed now (None: it is, if its definition is
    registered)."""
    if instance.status not in ACTIVE_STATUSES:
        return TickEnding.INACTIVE
    if instance.alarm_at is None or instance.alarm_at > now:
        return TickEnding.NOT_DUE
    if definition_paused:
        # Held: left due and without a bell (the sweeper skips it too); resuming the
        # definition rings it (runtime/definition_pauses.py).
        return TickEnding.HELD
    if instance.status == WorkflowStatus.PENDING and instance.admitted_at is None:
        return TickEnding.QUEUED
    if lease.is_live(instance, now):
        return TickEnding.BUSY
    return None


def _unrecorded(instance: WorkflowInstance, has_steps: bool) -> bool:
    """True when the claim's read found no step of the instance and none can appear before
    the lease is taken: a pending instance never had a tick, so no worker, not even one
    whose lease ran out, can be writing a step of it (its steps, a fork's copies, are
    committed with its row). Its first replay then reads nothing."""
    return not has_steps and instance.status == WorkflowStatus.PENDING


def _woken_for(instance: WorkflowInstance, now: datetime) -> WokenFor | None:
    """What the claimed instance was due for, and since when: a pending one was started
    (due when admitted) or started by its schedule (due at the occurrence); otherwise the
    cause kept beside the alarm, due at the alarm. None for what the wake lag does not
    count (a lease's expiry, an operator's wake, a wait's timeout, a yield)."""
    if instance.status == WorkflowStatus.PENDING:
        if instance.alarm_cause == WakeCause.START and instance.alarm_at is not None:
            return WakeCause.START, instance.alarm_at, now  # a debounced start put it off
        if instance.alarm_cause == WakeCause.SCHEDULE:
            return WakeCause.SCHEDULE, _occurrence(instance) or instance.created_at, now
        return WakeCause.START, instance.admitted_at or instance.created_at, now
    # A cause this release does not know (a newer one set it) is not counted.
    if instance.alarm_cause in WakeCause.values and instance.alarm_at is not None:
        return WakeCause(instance.alarm_cause), instance.alarm_at, now
    return None


def _occurrence(instance: WorkflowInstance) -> datetime | None:
    """The occurrence a schedule started the instance for: its input's ``scheduled_at``
    (:func:`~django_workerflow.runtime.flow.schedules.occurrence_key`)."""
    given = instance.input.get("scheduled_at") if isinstance(instance.input, dict) else None
    try:
        return datetime.fromisoformat(given) if isinstance(given, str) else None
    except ValueError:
        return None


def _execute(
    instance: WorkflowInstance,
    definition_class: type[WorkflowDefinition],
    token: str,
    claim: tuple[float, bool, bool, int | None, HeldClaim | None],
    traced: tracing.TickTrace,
) -> TickReport:
    """Replay and settle until the tick ends. ``claim``: when the lease was taken, whether it
    was taken over, whether the claim found no step recorded, the bell to acknowledge, and
    the claim's transaction if it is still open (the first write commits it)."""
    taken_at, recovering, unrecorded, bell, held = claim
    deadline = time.monotonic() + settings.TICK_BUDGET
    suspects: set[str] | None = None if recovering else set()
    replays = 0
    # The progress the row holds and the passes report, shared by the tick's passes.
    progress = PendingProgress(instance.pk, token, instance.progress)
    attributes = PendingAttributes(instance.pk, token, instance.attributes)
    while True:
        replays += 1
        store = StepStore(
            instance.pk,
            lease_token=token,
            start_child=starting.start,
            progress=progress,
            lease_taken_at=taken_at,
            attributes=attributes,
            held_claim=held if held is not None and held.open else None,
        )
        # Nothing read twice: a first tick's claim found no step to replay.
        steps = store.load_none() if unrecorded and replays == 1 else store.load()
        if suspects is None:
            suspects = interrupted.interrupted_run_steps(steps)
        execution, passed = _replay(instance, definition_class, store, deadline, suspects, traced)
        if traced.to_link():
            traced.link_received(received_trace_contexts(traced.to_link()))
        if held is not None:
            # A pass that wrote nothing: the claim commits before the settle, whose
            # transaction takes the finish's waiters before the instance (the lock order).
            store.held_claim = None
            held.commit()
        result = _settle(
            instance, token, execution, passed, replays, progress, attributes, bell=bell
        )
        if result is not None:
            failed = result.outcome == TickEnding.FAILED
            traced.finished(result.outcome, passed.exception if failed else None)
            return result


def _replay(
    instance: WorkflowInstance,
    definition_class: type[WorkflowDefinition],
    store: StepStore,
    deadline: float,
    suspects: set[str],
    traced: tracing.TickTrace,
) -> tuple[Execution, PassReport]:
    """One pass of ``execute()``; a success it holds in memory is written by the settle."""
    execution = Execution(
        instance_key=instance.key,
        store=store,
        deadline=deadline,
        interrupted_suspects=suspects,
        trace=traced,
        definition_name=instance.definition_name,
        instance_deadline=instance.deadline_at,
        instance_timeout=instance.timeout_seconds,
        quiet_errors=bool(definition_class.sensitive),
        sealer=sensitive.sealer(instance.definition_name),
    )
    # Each pass gets the pinned input afresh: a pass that changes it must not change the next.
    pinned_input = jsonvalue.fresh_copy(open_value(instance.input))
    definition = definition_class(key=instance.key, input=pinned_input, execution=execution)
    result = _run_pass(definition, execution)
    # A pass cut short (stopped, yielded, timed out) did not reach every step it would.
    if not (
        result.stop_reason or result.yielded or isinstance(execution.fatal, WorkflowTimeoutError)
    ):
        result.unreached = unreached_steps(store.steps, execution.seen_step_ids)
    return execution, result


def _run_pass(definition: WorkflowDefinition, execution: Execution) -> PassReport:
    try:
        if execution.instance_deadline is not None:
            # Woken at its deadline (or past it): fails before any of its code runs.
            execution.check_deadline()
        value = definition.execute()
    except ExecutionStopped:
        return PassReport(
            PassEnding.SUSPENDED, stop_reason=execution.stop_reason or StopReason.STOPPED
        )
    except Suspension:
        return _suspended(execution)
    except BaseException as exc:  # exit() in workflow code fails it too (see passes_through)
        if passes_through(exc):
            raise
        return _failed(execution.fatal or exc)
    if execution.fatal is not None:
        return _failed(execution.fatal)
    if execution.suspended:
        # User code swallowed a suspension: a step still waits, so the workflow goes on.
        return _suspended(execution)
    try:
        sealed = execution.sealer.result(value)
        result_json = jsonvalue.dumps(sealed, what="The workflow's return value")
    except WorkflowInputError as exc:
        return _failed(exc)
    return PassReport(PassEnding.COMPLETED, result_json=result_json)


def _flush(execution: Execution, result: PassReport) -> PassReport:
    """Write the success held in memory in the settle's transaction, so it is durable
    before (and with) the suspension or the finish; a lost lease or a stopped instance
    found by that write ends the pass as stopped."""
    try:
        execution.flush()
    except ExecutionStopped:
        return PassReport(PassEnding.SUSPENDED, stop_reason=execution.stop_reason)
    return result


def _failed(exc: BaseException) -> PassReport:
    """A failed pass; the steps whose failure escaped ``execute()`` (the error's own, and the
    other failed branches of an ``all()``) are what a retry reopens."""
    step_ids = failed_step_ids(exc)
    return PassReport(
        PassEnding.FAILED,
        error_name=storable.error_name(exc),
        error_message=error_message(exc),
        error_traceback=format_user_traceback(exc),
        error_step_id=step_ids[0] if step_ids else "",
        other_error_step_ids=step_ids[1:] or None,
        exception=exc,
    )


def _suspended(execution: Execution) -> PassReport:
    return PassReport(
        PassEnding.SUSPENDED,
        due=execution.next_due(),
        due_cause=execution.next_due_cause(),
        stop_reason=execution.stop_reason,
        yielded=execution.yielded,
    )


# Settling -----------------------------------------------------------------------------


def _settle(
    instance: WorkflowInstance,
    token: str,
    execution: Execution,
    result: PassReport,
    replays: int,
    progress: PendingProgress,
    attributes: PendingAttributes,
    *,
    bell: int | None = None,
) -> TickReport | None:
    """Commit the pass's outcome and release the lease, or return None to replay again.
    ``bell``: the tick's bell, deleted with a finish.

    The pass's last success commits in this transaction, whatever the lease's fate (the
    step row fences it), so a short workflow's tick ends in one commit, not two; so does
    the progress and attributes it set and no step write took (fenced by the lease)."""
    finishes = result.outcome in (PassEnding.COMPLETED, PassEnding.FAILED)
    with transaction.atomic():
        # The lock order (store/locks.py): whoever waits for this instance first.
        followups = finishing.lock_waiters(instance.pk, bell=bell) if finishes else None
        if (
            result.outcome == PassEnding.COMPLETED
            and progress.pending is None
            and attributes.pending is None
            and not result.unreached
            and instance_rows.one_statement()
        ):
            assert followups is not None  # taken above for every finishing outcome
            completed = _complete_at_once(instance, token, execution, result, replays, followups)
            if completed is not None:
                return completed
        return _settle_locked(
            instance, token, execution, result, replays, followups, progress, attributes
        )


def _complete_at_once(
    instance: WorkflowInstance,
    token: str,
    execution: Execution,
    result: PassReport,
    replays: int,
    followups: finishing.Followups,
) -> TickReport | None:
    """The common settle of a completed pass in one statement, with the success held in
    memory: the instance still running under this tick's lease moves to completed (see
    :func:`~django_workerflow.store.instance_rows.complete`). None: it matched nothing and
    wrote nothing, the settle goes on as before in the same transaction (a lost lease, a
    pause or cancel, a definition paused, a step changed)."""
    pending = execution.store.pending_success
    success = None
    if pending is not None:
        success = (pending.record.pk, pending.attempt, pending.result_json)
    now = clock_now()
    assert result.result_json is not None  # a completed pass has its result
    locked = instance_rows.complete(instance.pk, token, result.result_json, success, now)
    if locked is None:
        return None
    execution.store.pending_success = None  # recorded with the completion
    finishing.instance_finished(locked, now, None, followups)
    logger.info("workflow completed key=%s replays=%s", locked.key, replays)
    return TickReport(TickEnding.COMPLETED, replays=replays)


def _settle_locked(
    instance: WorkflowInstance,
    token: str,
    execution: Execution,
    result: PassReport,
    replays: int,
    followups: finishing.Followups | None,
    progress: PendingProgress,
    attributes: PendingAttributes,
) -> TickReport | None:
    """The settle's work, in its transaction, the finish's waiters locked (``followups``,
    None unless the pass finishes). A rollback raises out of the tick, whose held progress
    goes with it (the next tick reads the row afresh)."""
    locked = instance_rows.read_instance(instance.pk, lock=True)
    result = _flush(execution, result)
    if locked is None:
        # Deleted mid-tick (a purge, an admin's delete): nothing is left to settle.
        return TickReport(TickEnding.MISSING, replays=replays)
    now = clock_now()
    if not lease.is_held(locked, token):
        logger.warning("lease lost key=%s: another worker owns the instance", locked.key)
        return TickReport(TickEnding.STOPPED, alarm_at=locked.alarm_at, replays=replays)
    # Before the lease is released: the write is fenced by it.
    write_pending(progress, attributes)
    if locked.status != WorkflowStatus.RUNNING:
        # Paused or cancelled during the pass: leave the state the operator set.
        locked.release_lease(None, now)
        return TickReport(TickEnding.STOPPED, alarm_at=locked.alarm_at, replays=replays)
    if result.stop_reason == StopReason.DEFINITION_PAUSED:
        # Its definition was paused during the pass: held, due, as the claim leaves it.
        locked.release_lease(now, now)
        logger.info("definition paused key=%s: the instance is held", locked.key)
        return TickReport(TickEnding.HELD, alarm_at=now, replays=replays)
    _note_unreached(locked, result.unreached)
    match result.outcome:
        case PassEnding.COMPLETED:
            assert followups is not None  # taken above for every finishing outcome
            locked.set_completed(jsonvalue.loads(result.result_json), now)
            finishing.instance_finished(locked, now, None, followups)
            logger.info("workflow completed key=%s replays=%s", locked.key, replays)
            return TickReport(TickEnding.COMPLETED, replays=replays)
        case PassEnding.FAILED:
            locked.set_failed(
                result.error_name,
                result.error_message,
                now,
                traceback=result.error_traceback,
                step_id=result.error_step_id,
                other_step_ids=result.other_error_step_ids,
            )
            assert followups is not None  # taken above for every finishing outcome
            finishing.instance_finished(locked, now, None, followups)
            logger.info(
                "workflow failed key=%s error=%s step=%s",
                locked.key,
                result.error_name,
                result.error_step_id or "-",
                # Not for a definition with sensitive fields: the traceback may quote one.
                exc_info=None if sensitive.paths(locked.definition_name) else result.exception,
            )
            return TickReport(TickEnding.FAILED, replays=replays)
        case PassEnding.SUSPENDED:
            return _settle_suspended(locked, result, replays, now)


def _settle_suspended(
    locked: WorkflowInstance, result: PassReport, replays: int, now: datetime
) -> TickReport | None:
    """Yield the worker, pass again at once (something is due or changed), or sleep until
    the earliest due time (None: until an event arrives), and never past the instance's
    deadline: its alarm rings then, and the pass it wakes fails it with
    WorkflowTimeoutError."""
    if result.yielded or replays >= MAX_REPLAYS_PER_TICK:
        locked.release_lease(now, now)
        bells.arm(locked.pk, now)
        return TickReport(TickEnding.YIELDED, alarm_at=now, replays=replays)
    due, cause = result.due, result.due_cause
    deadline = locked.deadline_at
    if deadline is not None and (due is None or deadline < due):
        due, cause = deadline, None  # not a wake the wake lag counts
    ready = due is not None and due <= now
    if locked.wake_requested or ready or result.stop_reason == StopReason.NOT_RUNNING:
        if locked.wake_requested:
            locked.clear_wake_request()
        return None
    locked.release_lease(due, now, cause)
    if due is not None:
        bells.arm(locked.pk, due)
    return TickReport(TickEnding.SUSPENDED, alarm_at=due, replays=replays)


def _note_unreached(locked: WorkflowInstance, unreached: list[str] | None) -> None:
    """Keep (and log once) the recorded steps a whole replay pass no longer reached: the
    definition changed under the instance."""
    if unreached is None or (unreached or None) == locked.unreached_step_ids:
        return
    if unreached:
        logger.warning(
            "replay no longer reaches recorded steps key=%s version=%s steps=%s: the "
            "definition changed under a running instance; register a new version instead",
            locked.key,
            locked.definition_version,
            ",".join(unreached),
        )
    locked.note_unreached(unreached or None)
