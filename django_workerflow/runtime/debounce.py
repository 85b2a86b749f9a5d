"""Debounce: a burst of starts under one key becomes one instance, run with the last input.

The first debounced start creates the instance with its first tick put off by the debounce.
A later one under the same key, while that instance has not started its first step (it is
pending, unleased, and has no step), replaces its input and puts the first tick off again,
to now plus the debounce but never past the first start plus ``max_debounce``. Once the
instance has started, a start behaves as every start does: it returns the instance.

The replacement takes the instance's row lock (:func:`~django_workerflow.store.locks.lock_instance`,
a single row first in its transaction; on SQLite the write lock first), and so does the tick
that claims the instance. One of them wins: either the start replaces the input first and the
tick, which reads the row once the start commits, finds its alarm in the future and leaves
it, or the tick starts the instance first and the start finds it running and changes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from django_workerflow.definition import options
from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.exceptions import WorkflowInputError
from django_workerflow.models import Step, WorkflowInstance, WorkflowStatus
from django_workerflow.store import locks
from django_workerflow.workers import bells

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Debounce:
    """How long a debounced start puts the first tick off, and the most it may be put off
    from the first start (None: no bound)."""

    delay: timedelta
    limit: timedelta | None

    def first_tick(self, created_at: datetime, now: datetime) -> datetime:
        """When the first tick of an instance created at ``created_at`` comes, after a
        debounced start at ``now``."""
        due = now + self.delay
        if self.limit is not None:
            due = min(due, created_at + self.limit)
        return due


def debounce_for(
    definition: type[WorkflowDefinition],
    debounce: float | timedelta | None,
    max_debounce: float | timedelta | None,
) -> Debounce | None:
    """The debounce a start of ``definition`` asks for: the start's values, else the
    definition's (None: the start is not debounced). Raises :class:`WorkflowInputError` for
    a value that is not a positive duration, or a ``max_debounce`` shorter than the
    debounce or without one."""
    debounce = definition.debounce if debounce is None else debounce
    max_debounce = definition.max_debounce if max_debounce is None else max_debounce
    problems = options.debounce_problems(debounce, max_debounce, what="{}=")
    if problems:
        raise WorkflowInputError(f"start() of '{definition.name}': " + "; ".join(problems) + ".")
    if debounce is None:
        return None
    limit = None if max_debounce is None else options.as_timedelta(max_debounce)
    return Debounce(options.as_timedelta(debounce), limit)


def check_debounceable(definition: type[WorkflowDefinition], key: str | None) -> str:
    """The key of a debounced start of ``definition``; raises :class:`WorkflowInputError`
    without one (a burst is the starts of one key)."""
    if key is None:
        raise WorkflowInputError(
            f"A debounced start of '{definition.name}' needs a key: starts are debounced per "
            "key, so pass key= (for example the id of the record whose saves start it)."
        )
    return key


def replace_input(
    key: str, name: str, version: str | None, input: Any, debounce: Debounce, now: datetime
) -> WorkflowInstance | None:
    """Under its row lock, replace the input of the instance ``key`` and put its first tick
    off, if it is an instance of ``name`` (at ``version``, if given) that has not started;
    return it either way (the caller checks it as any start does). None: no such key (it
    was purged meanwhile)."""
    with transaction.atomic():
        locks.write_held()
        pk = WorkflowInstance.objects.filter(key=key).values_list("pk", flat=True).first()
        if pk is None:
            return None
        instance = locks.lock_instance(pk)
        same = instance.definition_name == name and version in (None, instance.definition_version)
        if not same or not _not_started(instance):
            return instance
        alarm = debounce.first_tick(instance.created_at, now)
        instance.set_debounced(input, alarm, now, rang=bells.ring(pk, alarm))
    logger.info(
        "workflow debounced key=%s definition=%s delay=%.3f",
        key,
        name,
        (alarm - now).total_seconds(),
    )
    return instance


def _not_started(instance: WorkflowInstance) -> bool:
    """Whether the locked ``instance`` has not started its first step: pending, admitted
    (not queued), unleased, and without a step (a fork is created with its source's)."""
    return (
        instance.status == WorkflowStatus.PENDING
        and instance.admitted_at is not None
        and instance.lease_token is None
        and not Step.objects.filter(instance_id=instance.pk).exists()
    )
