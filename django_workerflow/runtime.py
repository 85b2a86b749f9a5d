"""Start, tick, send_event, pause, resume, cancel: the only writer of instance state.

Every operation locks the instance row with ``select_for_update`` in a short transaction, so
concurrent workers, events and operators serialise on it. A tick takes a lease on the
instance, replays ``execute()`` once and keeps executing; each step outcome commits in its
own transaction (see :mod:`django_workerflow.store`), and the tick's last transaction sets
the instance's single alarm and releases the lease.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q

from . import alarms, jsonvalue, registry
from .clock import now as clock_now
from .conf import settings
from .control import ExecutionStopped, Suspension
from .definition import WorkflowDefinition
from .exceptions import (
    WorkflowInputError,
    WorkflowStateError,
    WorkflowVersionConflictError,
)
from .execution import Execution, error_message
from .lease import LeaseHeartbeat
from .models import (
    ACTIVE_STATUSES,
    InboundEvent,
    Step,
    StepState,
    StepType,
    WorkflowEvent,
    WorkflowEventType,
    WorkflowInstance,
    WorkflowStatus,
)
from .signals import workflow_status_changed
from .store import StepStore, satisfy_wait

logger = logging.getLogger(__name__)

# How long an instance whose definition is not registered waits before it is looked at again.
UNREGISTERED_RETRY = timedelta(minutes=1)
# A pass that suspends with work already due replays at once; this many passes in one tick
# means something keeps waking it, so the worker yields to others.
MAX_REPLAYS_PER_TICK = 100
# An alarm this far overdue has lost its bell (or its worker): the sweeper rings it again.
SWEEP_GRACE = timedelta(seconds=15)
# How long the sweeper waits before ringing the same overdue instance again.
SWEEP_RERING = timedelta(minutes=2)


# Start --------------------------------------------------------------------------------


def start(
    definition: str | type[WorkflowDefinition],
    *,
    key: str | None = None,
    input: Any = None,
    version: str | None = None,
) -> WorkflowInstance:
    """Create an instance of ``definition`` under ``key``, or return the existing one.

    Idempotent on ``key``: the first call pins the input and the definition version. A
    different ``version`` for a non-terminal instance raises WorkflowVersionConflictError.
    """
    if isinstance(definition, type) and issubclass(definition, WorkflowDefinition):
        name = definition.name
        version = definition.version if version is None else version
    elif isinstance(definition, str):
        name = definition
    else:
        raise WorkflowInputError(
            f"start() takes a definition name or class, not {type(definition).__name__}."
        )
    definition_class = registry.get(name, version)
    key = str(uuid.uuid4()) if key is None else key
    jsonvalue.check_identifier(key, what="An instance key", max_length=255)
    input_json = jsonvalue.dumps(input, what="The workflow input")

    existing = WorkflowInstance.objects.filter(key=key).first()
    if existing is None:
        now = clock_now()
        try:
            with transaction.atomic():
                instance = WorkflowInstance.objects.create(
                    key=key,
                    definition_name=name,
                    definition_version=definition_class.version,
                    input=jsonvalue.loads(input_json),
                    status=WorkflowStatus.PENDING,
                    alarm_at=now,
                    created_at=now,
                    updated_at=now,
                )
                _record(instance, WorkflowEventType.CREATED, now)
                alarms.arm(instance.pk, now)
                _announce(instance, WorkflowStatus.PENDING, None)
        except IntegrityError:
            existing = WorkflowInstance.objects.filter(key=key).first()
            if existing is None:
                raise
        else:
            logger.info(
                "workflow created key=%s definition=%s version=%s",
                key,
                name,
                instance.definition_version,
            )
            return instance
    return _existing_start(existing, name, version)


def _existing_start(instance: WorkflowInstance, name: str, version: str | None) -> WorkflowInstance:
    if instance.definition_name != name:
        raise WorkflowInputError(
            f"Instance key '{instance.key}' already belongs to a '{instance.definition_name}' "
            f"workflow, not '{name}'. Use another key."
        )
    if version is not None and version != instance.definition_version and not instance.is_terminal:
        raise WorkflowVersionConflictError(
            f"Workflow definition version is already pinned to '{instance.definition_version}' "
            f"and cannot be changed to '{version}'."
        )
    return instance


# Events -------------------------------------------------------------------------------


def send_event(
    instance: WorkflowInstance | str, event_name: str, payload: Any = None
) -> InboundEvent | None:
    """Deliver an event: it satisfies the earliest waiting step of that name, or is queued.

    A paused instance only queues it; a finished one ignores it and None is returned.
    """
    jsonvalue.check_identifier(event_name, what="An event name")
    payload_json = jsonvalue.dumps(payload, what=f"The payload of event '{event_name}'")
    pk = _pk(instance)
    with transaction.atomic():
        locked = _lock(pk)
        if locked.is_terminal:
            return None
        now = clock_now()
        event = InboundEvent.objects.create(
            instance=locked,
            event_name=event_name,
            payload=jsonvalue.loads(payload_json),
            created_at=now,
        )
        if locked.status in ACTIVE_STATUSES:
            step_pk = (
                Step.objects.filter(
                    instance_id=pk,
                    type=StepType.WAIT,
                    state=StepState.WAITING,
                    event_name=event_name,
                )
                .exclude(timeout_at__lt=now)
                .order_by("created_at", "id")
                .values_list("pk", flat=True)
                .first()
            )
            if step_pk is not None:
                with connection.cursor() as cursor:
                    satisfy_wait(cursor, connection.alias, step_pk, pk, event.pk, payload_json, now)
                event.claimed_by_id = step_pk
                event.claimed_at = now
                _wake(locked, now)
    logger.info(
        "event sent key=%s event=%s claimed=%s%s",
        locked.key,
        event_name,
        event.claimed_by_id is not None,
        f" payload={payload_json}" if settings.LOG_PAYLOADS else "",
    )
    return event


# Control ------------------------------------------------------------------------------


def pause(instance: WorkflowInstance | str) -> bool:
    """Pause a running instance; it stops at its next step boundary. False: nothing to do."""
    with transaction.atomic():
        locked = _lock(_pk(instance))
        if locked.status != WorkflowStatus.RUNNING:
            return False
        _transition(locked, WorkflowStatus.PAUSED, WorkflowEventType.PAUSED, alarm_at=None)
    _refresh(instance, locked)
    return True


def resume(instance: WorkflowInstance | str) -> None:
    """Resume a paused instance at once; WorkflowStateError if it is not paused."""
    with transaction.atomic():
        locked = _lock(_pk(instance))
        if locked.status != WorkflowStatus.PAUSED:
            raise WorkflowStateError(
                f"Cannot resume workflow: expected status 'paused' but got '{locked.status}'."
            )
        now = clock_now()
        _transition(locked, WorkflowStatus.RUNNING, WorkflowEventType.RESUMED, alarm_at=now)
        alarms.arm(locked.pk, now)
    _refresh(instance, locked)


def cancel(instance: WorkflowInstance | str, reason: str | None = None) -> bool:
    """Cancel an unfinished instance; no step starts after this. False: already finished."""
    if reason is not None and not isinstance(reason, str):
        raise WorkflowInputError(f"A cancel reason must be a string, not {type(reason).__name__}.")
    with transaction.atomic():
        locked = _lock(_pk(instance))
        if locked.is_terminal:
            return False
        _transition(
            locked,
            WorkflowStatus.CANCELLED,
            WorkflowEventType.CANCELLED,
            alarm_at=None,
            reason=reason or None,
            finished=True,
        )
    _refresh(instance, locked)
    return True


def wake(instance: WorkflowInstance | str) -> bool:
    """Ring the instance's alarm now (re-drive it). False if it is not pending or running."""
    with transaction.atomic():
        locked = _lock(_pk(instance))
        if locked.status not in ACTIVE_STATUSES:
            return False
        _wake(locked, clock_now())
    return True


def retry_now(instance: WorkflowInstance | str) -> list[str]:
    """Bring the pending retries of an active instance forward to now; return their step ids.

    Only a run step's backoff is shortened: a sleep or a wait keeps its time, which is part
    of the workflow. Call :func:`wake` afterwards so that a worker picks the retry up.
    """
    with transaction.atomic():
        locked = _lock(_pk(instance))
        if locked.status not in ACTIVE_STATUSES:
            return []
        now = clock_now()
        retrying = Step.objects.filter(
            instance_id=locked.pk,
            type=StepType.RUN,
            state=StepState.PENDING,
            next_attempt_at__gt=now,
        )
        step_ids = list(retrying.order_by("created_at", "id").values_list("step_id", flat=True))
        if step_ids:
            retrying.update(next_attempt_at=now)
            logger.info("retry brought forward key=%s steps=%s", locked.key, len(step_ids))
    return step_ids


def sweep(*, limit: int = 1000) -> int:
    """Ring the bells that are missing; return how many rang. Safe to run concurrently.

    Overdue active instances (a lost bell, or a worker that died holding the lease: its
    lease expiry is the alarm) are rung now; alarms coming due within the bell horizon get
    their precise bell if none is queued for that time yet.
    """
    now = clock_now()
    active = WorkflowInstance.objects.active()
    overdue = list(
        active.filter(alarm_at__lte=now - SWEEP_GRACE)
        # Not again while the sweep's own bell may still be waiting in a busy queue.
        .filter(
            Q(bell_at__isnull=True)
            | Q(bell_at__lte=F("alarm_at"))
            | Q(bell_at__lte=now - SWEEP_RERING)
        )
        .order_by("alarm_at")
        .values_list("pk", flat=True)[:limit]
    )
    upcoming = list(
        active.filter(alarm_at__gt=now - SWEEP_GRACE, alarm_at__lte=now + alarms.HORIZON)
        .exclude(bell_at=F("alarm_at"))
        # A leased instance's alarm is its lease expiry: its tick is still at work.
        .exclude(lease_expires_at__gt=now)
        .order_by("alarm_at")
        .values_list("pk", "alarm_at")[:limit]
    )
    with transaction.atomic():
        for pk in overdue:
            alarms.arm(pk, now)
        for pk, alarm_at in upcoming:
            alarms.arm(pk, alarm_at)
    if overdue or upcoming:
        logger.info("sweep overdue=%s upcoming=%s", len(overdue), len(upcoming))
    return len(overdue) + len(upcoming)


# Tick ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TickResult:
    """What a tick did: ``outcome`` is one of completed, failed, suspended, yielded,
    stopped, busy, not_due, inactive, unregistered, missing."""

    outcome: str
    alarm_at: datetime | None = None
    replays: int = 0


def tick(instance_pk: int, *, heartbeat: bool = False) -> TickResult:
    """Execute the instance as far as it can go now. Safe to call at any time, any number
    of times, from any worker: an instance that is not due, not active, or leased by a live
    worker is left as it is (a live lease gets a request for one more pass).

    ``heartbeat`` renews the lease from a background thread while callbacks run (workers
    use it; it needs the tick to run outside any transaction).
    """
    token = uuid.uuid4().hex
    claimed = _claim(instance_pk, token)
    if isinstance(claimed, TickResult):
        return claimed
    instance, definition_class, recovering = claimed
    with LeaseHeartbeat(instance_pk, token) if heartbeat else nullcontext():
        return _execute(instance, definition_class, token, recovering)


def _execute(
    instance: WorkflowInstance,
    definition_class: type[WorkflowDefinition],
    token: str,
    recovering: bool,
) -> TickResult:
    deadline = time.monotonic() + settings.TICK_BUDGET
    suspects: set[str] | None = None if recovering else set()
    replays = 0
    while True:
        replays += 1
        store = StepStore(instance.pk, lease_token=token)
        steps = store.load()
        if suspects is None:
            suspects = {
                step_id
                for step_id, step in steps.items()
                if step.type == StepType.RUN and step.state == StepState.RUNNING
            }
        outcome = _replay(instance, definition_class, store, deadline, suspects)
        result = _settle(instance, token, outcome, replays)
        if result is not None:
            return result


def _claim(
    instance_pk: int, token: str
) -> TickResult | tuple[WorkflowInstance, type[WorkflowDefinition], bool]:
    with transaction.atomic():
        instance = WorkflowInstance.objects.select_for_update().filter(pk=instance_pk).first()
        if instance is None:
            return TickResult("missing")
        if instance.status not in ACTIVE_STATUSES:
            return TickResult("inactive", alarm_at=instance.alarm_at)
        now = clock_now()
        if instance.alarm_at is None or instance.alarm_at > now:
            return TickResult("not_due", alarm_at=instance.alarm_at)
        if instance.lease_token and instance.lease_expires_at and instance.lease_expires_at > now:
            if not instance.wake_requested:
                instance.wake_requested = True
                instance.save(update_fields=["wake_requested"])
            return TickResult("busy", alarm_at=instance.alarm_at)
        definition_class = registry.lookup(instance.definition_name, instance.definition_version)
        if definition_class is None:
            logger.warning(
                "definition not registered key=%s definition=%s version=%s: the instance "
                "waits untouched until the code is deployed again",
                instance.key,
                instance.definition_name,
                instance.definition_version,
            )
            instance.alarm_at = now + UNREGISTERED_RETRY
            instance.save(update_fields=["alarm_at"])
            alarms.arm(instance.pk, instance.alarm_at)
            return TickResult("unregistered", alarm_at=instance.alarm_at)
        expires = now + timedelta(seconds=settings.LEASE_SECONDS)
        recovering = instance.lease_token is not None
        if recovering:
            logger.warning("taking over an expired lease key=%s", instance.key)
        instance.lease_token = token
        instance.lease_expires_at = expires
        # If this worker dies, the instance is due again when its lease runs out.
        instance.alarm_at = expires
        instance.wake_requested = False
        fields = ["lease_token", "lease_expires_at", "alarm_at", "wake_requested"]
        if instance.status == WorkflowStatus.PENDING:
            _transition(
                instance, WorkflowStatus.RUNNING, WorkflowEventType.STARTED, alarm_at=expires
            )
        else:
            instance.save(update_fields=fields)
    # A lease still set here has expired: the tick that held it died mid-work.
    return instance, definition_class, recovering


@dataclass(slots=True)
class _Outcome:
    kind: str  # completed, failed, suspended
    result_json: str | None = None
    error_name: str = ""
    error_message: str = ""
    due: datetime | None = None
    stop_reason: str | None = None
    yielded: bool = False
    unreached: list[str] | None = None


def _replay(
    instance: WorkflowInstance,
    definition_class: type[WorkflowDefinition],
    store: StepStore,
    deadline: float,
    suspects: set[str],
) -> _Outcome:
    execution = Execution(
        instance_key=instance.key,
        store=store,
        deadline=deadline,
        interrupted_suspects=suspects,
    )
    definition = definition_class(key=instance.key, input=instance.input, execution=execution)
    outcome = _outcome_of(definition, execution)
    if not (outcome.stop_reason or outcome.yielded):
        outcome.unreached = _unreached_steps(store, execution.seen_step_ids)
    return outcome


def _unreached_steps(store: StepStore, seen: set[str]) -> list[str]:
    """Recorded steps a whole pass should have reached again but did not: the code changed.

    Steps nested in a settled run step are not expected: its callback does not run again.
    """
    steps = store.steps
    unreached = []
    for step_id, step in steps.items():
        if step_id in seen:
            continue
        parent = steps.get(step.parent_step_id) if step.parent_step_id else None
        if parent is None or parent.state == StepState.RUNNING:
            unreached.append(step_id)
    return unreached


def _outcome_of(definition: WorkflowDefinition, execution: Execution) -> _Outcome:
    try:
        value = definition.execute()
    except ExecutionStopped:
        return _Outcome("suspended", stop_reason=execution.stop_reason or "stopped")
    except Suspension:
        return _suspended(execution)
    except Exception as exc:
        return _failed(execution.fatal or exc)
    if execution.fatal is not None:
        return _failed(execution.fatal)
    if execution.suspended:
        # User code swallowed a suspension: a step still waits, so the workflow goes on.
        return _suspended(execution)
    try:
        result_json = jsonvalue.dumps(value, what="The workflow's return value")
    except WorkflowInputError as exc:
        return _failed(exc)
    return _Outcome("completed", result_json=result_json)


def _failed(exc: BaseException) -> _Outcome:
    return _Outcome("failed", error_name=type(exc).__name__, error_message=error_message(exc))


def _suspended(execution: Execution) -> _Outcome:
    return _Outcome(
        "suspended",
        due=execution.next_due(),
        stop_reason=execution.stop_reason,
        yielded=execution.yielded,
    )


def _settle(
    instance: WorkflowInstance,
    token: str,
    outcome: _Outcome,
    replays: int,
) -> TickResult | None:
    """Commit the pass's outcome and release the lease, or return None to replay again."""
    with transaction.atomic():
        locked = _lock(instance.pk)
        if locked.lease_token != token:
            logger.warning("lease lost key=%s: another worker owns the instance", locked.key)
            return TickResult("stopped", alarm_at=locked.alarm_at, replays=replays)
        now = clock_now()
        if locked.status != WorkflowStatus.RUNNING:
            # Paused or cancelled during the pass: leave the state the operator set.
            _release(locked)
            return TickResult("stopped", alarm_at=locked.alarm_at, replays=replays)
        _note_unreached(locked, outcome.unreached)
        if outcome.kind == "completed":
            locked.result = jsonvalue.loads(outcome.result_json)
            _release(locked, save=False)
            _transition(
                locked,
                WorkflowStatus.COMPLETED,
                WorkflowEventType.COMPLETED,
                alarm_at=None,
                finished=True,
                extra_fields=["result", "lease_token", "lease_expires_at", "wake_requested"],
            )
            logger.info("workflow completed key=%s replays=%s", locked.key, replays)
            return TickResult("completed", replays=replays)
        if outcome.kind == "failed":
            locked.error_name = outcome.error_name
            locked.error_message = outcome.error_message
            _release(locked, save=False)
            _transition(
                locked,
                WorkflowStatus.FAILED,
                WorkflowEventType.FAILED,
                alarm_at=None,
                finished=True,
                extra_fields=[
                    "error_name",
                    "error_message",
                    "lease_token",
                    "lease_expires_at",
                    "wake_requested",
                ],
            )
            logger.info("workflow failed key=%s error=%s", locked.key, outcome.error_name)
            return TickResult("failed", replays=replays)
        if outcome.yielded or replays >= MAX_REPLAYS_PER_TICK:
            _release(locked, alarm_at=now)
            alarms.arm(locked.pk, now)
            return TickResult("yielded", alarm_at=now, replays=replays)
        ready = outcome.due is not None and outcome.due <= now
        if locked.wake_requested or ready or outcome.stop_reason == "not_running":
            if locked.wake_requested:
                locked.wake_requested = False
                locked.save(update_fields=["wake_requested"])
            return None
        _release(locked, alarm_at=outcome.due)
        if outcome.due is not None:
            alarms.arm(locked.pk, outcome.due)
        return TickResult("suspended", alarm_at=outcome.due, replays=replays)


# Helpers ------------------------------------------------------------------------------


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
    locked.unreached_step_ids = unreached or None
    locked.save(update_fields=["unreached_step_ids"])


def _pk(instance: WorkflowInstance | str) -> int:
    if isinstance(instance, WorkflowInstance):
        return instance.pk
    if isinstance(instance, str):
        try:
            return WorkflowInstance.objects.values_list("pk", flat=True).get(key=instance)
        except WorkflowInstance.DoesNotExist:
            raise WorkflowInstance.DoesNotExist(
                f"No workflow instance has the key {instance!r}."
            ) from None
    raise WorkflowInputError(
        f"Expected a WorkflowInstance or an instance key, not {type(instance).__name__}."
    )


def _lock(pk: int) -> WorkflowInstance:
    return WorkflowInstance.objects.select_for_update().get(pk=pk)


def _refresh(target: WorkflowInstance | str, source: WorkflowInstance) -> None:
    """Copy the committed state onto the caller's object, so ``instance.status`` is current."""
    if isinstance(target, WorkflowInstance) and target is not source:
        for field in WorkflowInstance._meta.concrete_fields:
            setattr(target, field.attname, getattr(source, field.attname))


def _wake(locked: WorkflowInstance, now: datetime) -> None:
    """Ask for a tick now; a tick in progress sees ``wake_requested`` and passes again."""
    locked.wake_requested = True
    locked.updated_at = now
    fields = ["wake_requested", "updated_at"]
    leased = locked.lease_token and locked.lease_expires_at and locked.lease_expires_at > now
    if not leased:
        locked.alarm_at = now
        fields.append("alarm_at")
        alarms.arm(locked.pk, now)
    locked.save(update_fields=fields)


def _release(
    locked: WorkflowInstance, *, alarm_at: datetime | None = None, save: bool = True
) -> None:
    locked.lease_token = None
    locked.lease_expires_at = None
    locked.wake_requested = False
    fields = ["lease_token", "lease_expires_at", "wake_requested", "alarm_at"]
    # Lease renewals moved the alarm while the tick ran; an inactive instance has none.
    locked.alarm_at = alarm_at if locked.status in ACTIVE_STATUSES else None
    if save:
        locked.updated_at = clock_now()
        locked.save(update_fields=[*fields, "updated_at"])


def _transition(
    locked: WorkflowInstance,
    status: str,
    event_type: str,
    *,
    alarm_at: datetime | None,
    reason: str | None = None,
    finished: bool = False,
    extra_fields: list[str] | None = None,
) -> None:
    """Change the status, record the workflow event and announce it after commit."""
    previous = locked.status
    now = clock_now()
    locked.status = status
    locked.alarm_at = alarm_at
    locked.updated_at = now
    fields = ["status", "alarm_at", "updated_at", *(extra_fields or [])]
    if finished:
        # The lease stays: a tick still executing records its step in flight, then ends.
        locked.finished_at = now
        fields.append("finished_at")
    if event_type == WorkflowEventType.STARTED:
        fields += ["lease_token", "lease_expires_at", "wake_requested"]
    locked.save(update_fields=list(dict.fromkeys(fields)))
    _record(locked, event_type, now, reason=reason)
    _announce(locked, status, previous)


def _record(
    instance: WorkflowInstance, event_type: str, now: datetime, *, reason: str | None = None
) -> None:
    WorkflowEvent.objects.create(instance=instance, type=event_type, reason=reason, recorded_at=now)


def _announce(instance: WorkflowInstance, status: str, previous: str | None) -> None:
    sender = registry.lookup(instance.definition_name, instance.definition_version)
    snapshot = WorkflowInstance(
        **{
            field.attname: getattr(instance, field.attname)
            for field in WorkflowInstance._meta.concrete_fields
        }
    )
    transaction.on_commit(
        lambda: workflow_status_changed.send(
            sender=sender, instance=snapshot, status=status, previous_status=previous
        )
    )
