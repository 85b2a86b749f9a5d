"""Flow control: concurrency limits, priorities and rate limits on starting instances.

A definition with ``max_concurrency`` or ``rate_limit`` queues its instances: ``start()``
creates them ``pending`` with no alarm and ``admitted_at`` unset. Admission sets
``admitted_at`` and the alarm, and rings the bell, so the next tick starts the instance.
An admitted instance holds a slot while it is pending, running or paused (a sleep or a
wait keeps it); finishing, failing or being cancelled frees it.

Every admission decision is taken under the lock of the
:class:`~django_workerflow.models.flow.AdmissionGate` row of the workflow name and concurrency key,
in the transaction that changes the count: the start that finds a free slot, the finish that frees
one (:mod:`django_workerflow.runtime.finishing` admits last, once every instance row of its
transaction is locked), or the tick of the queue head whose rate-limit bell rang. Counting the slots
in use and taking one are therefore atomic under any number of workers, and nothing polls.

The lock order is the engine's (:mod:`django_workerflow.store.locks`, which takes the gate
and the queued rows): a gate after every instance row its transaction locks, and the
queued rows after their gate, taken with ``SKIP LOCKED``. A queued row that another
transaction holds is left for the next admission: whoever holds it is cancelling it, or is
its own tick or an event, which asks for admission again once it lets the row go.

A *shared gate* (:func:`share_gate`) is a concurrency key whose limits hold across every
definition: its instances are counted, queued and admitted together whatever their
definition (the ``django.tasks`` backend's queues, where each task function is its own
definition). Its gate row has the empty definition name, which no definition has.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import models, transaction
from django.db.models import Q

from django_workerflow import registry
from django_workerflow.exceptions import WorkflowInputError, WorkflowNotRegisteredError
from django_workerflow.models import WorkflowInstance, WorkflowStatus
from django_workerflow.store import locks
from django_workerflow.values import storable
from django_workerflow.values.clock import now as clock_now
from django_workerflow.workers import bells

if TYPE_CHECKING:
    from django_workerflow.definition.workflow import WorkflowDefinition

logger = logging.getLogger(__name__)

#: Statuses in which an admitted instance holds its slot.
SLOT_STATUSES = (WorkflowStatus.PENDING, WorkflowStatus.RUNNING, WorkflowStatus.PAUSED)


@dataclass(frozen=True, slots=True)
class Limits:
    """The flow-control settings of a definition."""

    max_concurrency: int | None
    rate_count: int | None
    rate_period: timedelta | None


@dataclass(frozen=True, slots=True)
class QueueState:
    """Why the queue of one gate is not moving: slots in use, and the rate-limit window."""

    in_use: int
    max_concurrency: int | None
    rate_count: int | None
    rate_period: timedelta | None
    next_rate_slot: datetime | None


# Concurrency keys whose limits hold across definitions, with those limits (share_gate).
_shared_gates: dict[str, Limits] = {}


def share_gate(concurrency_key: str, limits: Limits) -> None:
    """Make ``limits`` hold for every instance with ``concurrency_key``, whatever its
    definition. A definition that may start instances on a shared gate sets
    ``shares_gates = True`` so that its starts take admission's path."""
    if not concurrency_key:
        raise ValueError("A shared gate needs a non-empty concurrency key.")
    _shared_gates[concurrency_key] = limits


def takes_admission(definition: type[WorkflowDefinition], key: str, input: Any) -> bool:
    """True when the start of instance ``key`` of ``definition`` goes through admission:
    its name has limits (those of the highest registered version, whichever version
    starts), or the instance counts on a shared gate (only a definition that sets
    ``shares_gates`` is asked for its concurrency key)."""
    if limits_for_name(definition.name) is not None:
        return True
    if not getattr(definition, "shares_gates", False):
        return False
    return concurrency_key_for(definition, key, input) in _shared_gates


def limits_for(name: str, concurrency_key: str) -> Limits | None:
    """The limits an instance of ``name`` with ``concurrency_key`` counts against: its
    shared gate's, else its definition's."""
    # Looked up first: finding the definition may load the code that shares the gate.
    own = limits_for_name(name)
    return _shared_gates.get(concurrency_key, own) if concurrency_key else own


def _members(name: str, concurrency_key: str) -> Q:
    """The instances that count against the gate of ``name`` and ``concurrency_key``."""
    if concurrency_key in _shared_gates:
        return Q(concurrency_key=concurrency_key)
    return Q(definition_name=name, concurrency_key=concurrency_key)


def gate_row(name: str, concurrency_key: str) -> tuple[str, str]:
    """The (definition name, concurrency key) of the gate row the instances of ``name`` with
    ``concurrency_key`` count against: a shared gate's row has the empty name."""
    return _gate_name(name, concurrency_key), concurrency_key


def _gate_name(name: str, concurrency_key: str) -> str:
    return "" if concurrency_key in _shared_gates else name


def limits_of(definition: type[WorkflowDefinition]) -> Limits | None:
    """The definition's limits, or None when it has neither a concurrency nor a rate limit."""
    rate = definition.rate_limit
    if definition.max_concurrency is None and rate is None:
        return None
    return Limits(
        max_concurrency=definition.max_concurrency,
        rate_count=rate[0] if rate else None,
        rate_period=rate[1] if rate else None,
    )


def limits_for_name(name: str) -> Limits | None:
    """The limits of the highest registered version of ``name`` (None: unknown or none)."""
    try:
        return limits_of(registry.get(name))
    except WorkflowNotRegisteredError:  # an unregistered name has no limits to apply
        return None


def check_priority(priority: int) -> None:
    """Refuse a priority that is not an integer the database stores."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise WorkflowInputError(
            f"start() takes an integer priority (lower is admitted first), not "
            f"{type(priority).__name__}."
        )
    if not -(2**31) <= priority < 2**31:
        raise WorkflowInputError(
            f"The priority {priority} is out of range; use an integer between "
            f"{-(2**31)} and {2**31 - 1}."
        )


def concurrency_key_for(definition: type[WorkflowDefinition], key: str, input: Any) -> str:
    """The definition's ``concurrency_key()`` for an instance about to start."""
    value = definition(key=key, input=input).concurrency_key()
    if not isinstance(value, str) or len(value) > 255:
        raise WorkflowInputError(
            f"{definition.__qualname__}.concurrency_key() returned {value!r:.80} for instance "
            f"{key!r}; it must return a string of at most 255 characters."
        )
    return storable.check_text(
        value, what=f"The concurrency key {definition.__qualname__}.concurrency_key() returned"
    )


def admit_waiting(name: str, concurrency_key: str, now: datetime) -> list[int]:
    """Admit queued instances of the gate as far as its limits allow; return their pks.

    Call inside a transaction: the gate stays locked until it commits. When the rate limit
    holds the queue back, the head's alarm is set to the earliest time it allows.
    """
    limits = limits_for(name, concurrency_key)
    locks.lock_gate(_gate_name(name, concurrency_key), concurrency_key, now)
    # Read the clock again under the lock: admission times then follow admission order.
    now = max(now, clock_now())
    queue = _queue(name, concurrency_key)
    admitted: list[int] = []
    while True:
        free, next_slot = _free_slots(name, concurrency_key, limits, now)
        if free <= 0:
            break
        # Never waits for a queued row (the lock order's rule 3); a row cancelled meanwhile
        # is skipped, or drops out once its lock is released.
        pks = locks.admit_queued(queue, free, now)
        if not pks:
            return admitted
        for pk in pks:
            bells.arm(pk, now)
        admitted.extend(pks)
        if len(pks) == free and limits is not None and limits.rate_count is None:
            break  # every slot taken: counting them again would only say so
    if next_slot is not None:
        head = locks.queue_head(queue)
        if head is not None and head[1] != next_slot:
            WorkflowInstance.objects.schedule_queue_head(head[0], next_slot)
            bells.arm(head[0], next_slot)
    if admitted:
        logger.debug(
            "admitted definition=%s concurrency_key=%s count=%s",
            name,
            concurrency_key,
            len(admitted),
        )
    return admitted


def holds_slot(instance: WorkflowInstance) -> bool:
    """Whether ``instance`` (just finished) held a slot of a limited workflow or a shared
    gate: it was admitted. A queued instance that is cancelled held none: nothing moves."""
    if instance.admitted_at is None:
        return False
    return limits_for(instance.definition_name, instance.concurrency_key) is not None


def pass_on_the_alarm(instance: WorkflowInstance, now: datetime) -> None:
    """The queued ``instance`` left a rate-limited queue (it was cancelled). The head of
    such a queue is the one queued instance with an alarm (at its rate-limit slot): if no
    other queued instance has one, the next gets an alarm now, and its tick runs admission,
    which admits it or moves the alarm to the slot (as a fork is created due, for one look).

    This takes no gate and waits for no queued row, keeping the lock order: a row locked
    by another transaction is skipped (an admission holding it sets the head's alarm
    itself).
    """
    if instance.admitted_at is not None:
        return
    limits = limits_for(instance.definition_name, instance.concurrency_key)
    if limits is None or limits.rate_count is None:
        return
    queue = _queue(instance.definition_name, instance.concurrency_key).exclude(pk=instance.pk)
    if queue.filter(alarm_at__isnull=False).exists():
        return
    head = locks.queue_head(queue)
    if head is None:
        return
    pk = head[0]
    WorkflowInstance.objects.wake_queued(pk, now)
    bells.arm(pk, now)


def admit_queued_instance(instance_pk: int, now: datetime) -> bool:
    """A bell rang for a queued instance (its rate-limit slot came): run admission for its
    gate; True if this instance was admitted."""
    row = (
        WorkflowInstance.objects.filter(pk=instance_pk)
        .values_list("definition_name", "concurrency_key")
        .first()
    )
    if row is None:
        return False
    with transaction.atomic():
        if instance_pk in admit_waiting(row[0], row[1], now):
            return True
        # Still queued and not the rate-limit head (whose alarm moved ahead): no alarm
        # until a freed slot admits it (a fork is created due, for one look).
        WorkflowInstance.objects.unschedule_queued(instance_pk, now)
        return False


def queue_state(name: str, concurrency_key: str, now: datetime) -> QueueState | None:
    """The slots in use and the rate-limit window of a gate (None: no limits)."""
    limits = limits_for(name, concurrency_key)
    if limits is None:
        return None
    in_use = _in_use(name, concurrency_key)
    next_slot = None
    if limits.rate_count is not None and limits.rate_period is not None:
        next_slot = _rate(name, concurrency_key, limits.rate_count, limits.rate_period, now)[1]
    return QueueState(
        in_use=in_use,
        max_concurrency=limits.max_concurrency,
        rate_count=limits.rate_count,
        rate_period=limits.rate_period,
        next_rate_slot=next_slot,
    )


def _queue(name: str, concurrency_key: str) -> models.QuerySet[WorkflowInstance]:
    """The queued instances of a gate, in admission order."""
    return WorkflowInstance.objects.filter(
        _members(name, concurrency_key),
        status=WorkflowStatus.PENDING,
        admitted_at__isnull=True,
    ).order_by("priority", "created_at", "id")


def _free_slots(
    name: str, concurrency_key: str, limits: Limits | None, now: datetime
) -> tuple[int, datetime | None]:
    """How many may be admitted now, and (when the rate limit is the bound) when next."""
    if limits is None:
        return 1_000, None
    free = 1_000
    if limits.max_concurrency is not None:
        free = limits.max_concurrency - _in_use(name, concurrency_key)
    if limits.rate_count is not None and limits.rate_period is not None:
        rate_free, next_slot = _rate(
            name, concurrency_key, limits.rate_count, limits.rate_period, now
        )
        if rate_free < free:
            return rate_free, next_slot
    return free, None


def _in_use(name: str, concurrency_key: str) -> int:
    return WorkflowInstance.objects.filter(
        _members(name, concurrency_key),
        admitted_at__isnull=False,
        status__in=SLOT_STATUSES,
    ).count()


def _rate(
    name: str, concurrency_key: str, count: int, period: timedelta, now: datetime
) -> tuple[int, datetime | None]:
    """Admissions still allowed in the window ending now, and when the next one is."""
    window = list(
        WorkflowInstance.objects.filter(
            _members(name, concurrency_key),
            admitted_at__gt=now - period,
        )
        .order_by("-admitted_at")
        .values_list("admitted_at", flat=True)[:count]
    )
    if len(window) < count:
        return count - len(window), None
    oldest = window[-1]
    assert oldest is not None  # filtered on admitted_at above
    return 0, oldest + period
