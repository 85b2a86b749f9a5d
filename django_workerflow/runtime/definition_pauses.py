"""Pause and resume a whole definition: every instance of it, in every cluster, at once.

A pause is a :class:`~django_workerflow.models.DefinitionPause` row. While it exists no
attempt of the definition's instances starts: a tick's claim leaves such an instance as it is
(held: due, without a bell; the sweeper skips it too), and a tick already running stops at its
next step boundary, where the fence of the step start refuses it (the outcome of a step that
ran is recorded all the same). Starts, events and child starts are accepted meanwhile, and
schedules record their occurrences: the rows wait. Resuming removes the row and rings the held
instances that are due, earliest alarm first; admission still applies the definition's limits.

An instance's own status is not touched: one paused with :func:`~.control.pause` stays paused
after the definition is resumed. The deadlines of the definition's unfinished instances with
a timeout move by the pause's length when it is resumed: an operator's pause makes no
instance time out.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction

from django_workerflow import registry
from django_workerflow.exceptions import WorkflowInputError
from django_workerflow.models import WorkflowInstance
from django_workerflow.store import definition_pauses, locks
from django_workerflow.values import storable
from django_workerflow.values.clock import now as clock_now
from django_workerflow.workers import bells

logger = logging.getLogger(__name__)


def pause_definition(name: str, *, reason: str, actor: str | None = None) -> bool:
    """Pause every instance of the definition ``name`` (all its versions); returns True, or
    False if it was paused already (that pause, its reason and author stand).

    ``reason`` is required (it is recorded with ``actor`` and the time). Raises
    :class:`~django_workerflow.exceptions.WorkflowNotRegisteredError` for a name no
    definition is registered under, :class:`~django_workerflow.exceptions.WorkflowInputError`
    for an empty reason. No attempt starts once this returns.
    """
    registry.get(name)
    reason = _reason(reason, verb="pause", required=True)
    actor_text = _actor(actor)
    now = clock_now()
    with transaction.atomic():
        paused = definition_pauses.add(name, reason, actor_text, now)
    if paused:
        logger.info("definition paused definition=%s actor=%s", name, actor_text or "-")
    return paused


def resume_definition(name: str, *, reason: str = "", actor: str | None = None) -> bool:
    """Let the instances of the definition ``name`` go on; returns True, or False if it was
    not paused. The held instances that are due are rung at once, earliest alarm first (a
    sleep or a wait still waits for its time).

    Raises :class:`~django_workerflow.exceptions.WorkflowNotRegisteredError` for a name that
    is neither registered nor paused."""
    if not definition_pauses.is_paused(name):
        registry.get(name)
    reason = _reason(reason, verb="resume", required=False)
    actor_text = _actor(actor)
    now = clock_now()
    with transaction.atomic():
        paused_at = definition_pauses.remove(name, reason, actor_text, now)
        if paused_at is None:
            return False
        # Time held does not count against an instance's timeout: moved in the transaction
        # that lets them go, so no tick sees the pause gone and the deadline unmoved.
        locks.delay_deadlines(WorkflowInstance.objects.held(name), now - paused_at)
    rang = _ring_held(name, now)
    logger.info("definition resumed definition=%s actor=%s rang=%s", name, actor_text or "-", rang)
    return True


def is_definition_paused(name: str) -> bool:
    """Whether the definition ``name`` is paused now (False for any name never paused)."""
    return definition_pauses.is_paused(name)


def _ring_held(name: str, now: datetime) -> int:
    """Ring the definition's active instances whose alarm has come (at once) or comes within
    the bell horizon (at their alarm), earliest first, in housekeeping batches (the lock
    order's rule 4: a row another transaction holds is being worked on and is skipped; the
    sweeper rings it if it still needs it). Returns how many rang."""
    held = WorkflowInstance.objects.held(name).filter(alarm_at__lte=now + bells.HORIZON)
    pks = list(held.order_by("alarm_at", "id").values_list("pk", flat=True))
    rang = 0
    for first in range(0, len(pks), locks.HOUSEKEEPING_BATCH):
        with transaction.atomic():
            taken = locks.take_unlocked(held, pks[first : first + locks.HOUSEKEEPING_BATCH])
            # Taken in primary-key order (the lock order); rung in due order.
            for pk, alarm_at in sorted(taken, key=lambda row: (row[1] or now, row[0])):
                bells.arm(pk, max(alarm_at or now, now))
        rang += len(taken)
    return rang


def _reason(reason: object, *, verb: str, required: bool) -> str:
    text = storable.check_reason(reason, verb=f"definition {verb}") or ""
    if required and not text.strip():
        raise WorkflowInputError(
            f"A definition {verb} needs a reason: say why (it is recorded with who and when), "
            "e.g. reason='partner API down'."
        )
    return text


def _actor(actor: str | None) -> str:
    if actor is None:
        return ""
    return storable.safe_text(str(actor), max_length=150)
