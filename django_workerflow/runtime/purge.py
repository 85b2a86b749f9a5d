"""Delete finished instances and all their rows, in batches, never an unfinished one.

A batch is one short transaction that deletes a set of instances' step events, inbound
events, workflow events, steps, and then the instances, each with one ``DELETE`` statement, so
the cost does not depend on how many steps an instance had and no row is loaded in Python.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import router, transaction
from django.db.models import Model, QuerySet

from django_workerflow.exceptions import WorkflowInputError
from django_workerflow.models import (
    TERMINAL_STATUSES,
    FinishDelivery,
    InboundEvent,
    Step,
    StoredStepEvent,
    WorkflowEvent,
    WorkflowInstance,
)
from django_workerflow.store import locks
from django_workerflow.store import purge as purge_rows
from django_workerflow.values.clock import now as clock_now

DEFAULT_BATCH_SIZE = 500
# Children before parents: every table that points at an instance, then the instances.
TABLES = (StoredStepEvent, InboundEvent, WorkflowEvent, Step, FinishDelivery)
# What a report calls one and several rows of each table (Django's default plural of
# FinishDelivery would read "finish deliverys").
NOUNS = {
    "instances": "instance",
    "step events": "step event",
    "inbound events": "inbound event",
    "workflow events": "workflow event",
    "steps": "step",
    "finish deliveries": "finish delivery",
}
_PLURALS = {
    StoredStepEvent: "step events",
    InboundEvent: "inbound events",
    WorkflowEvent: "workflow events",
    Step: "steps",
    FinishDelivery: "finish deliveries",
}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")


@dataclass(slots=True)
class PurgeReport:
    """How many rows of each kind were (or, on a dry run, would be) deleted."""

    cutoff: datetime
    dry_run: bool
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def instances(self) -> int:
        return self.counts.get("instances", 0)

    def add(self, counts: dict[str, int]) -> None:
        for name, count in counts.items():
            self.counts[name] = self.counts.get(name, 0) + count

    def rows(self) -> str:
        """The rows other than instances, as "12 steps, 1 inbound event, 0 finish deliveries"."""
        return ", ".join(
            f"{count} {name if count != 1 else NOUNS[name]}"
            for name, count in self.counts.items()
            if name != "instances"
        )


def parse_duration(text: str) -> timedelta:
    """ "30d", "12h", "45m", "90s" or "2w" as a timedelta; WorkflowInputError otherwise."""
    match = _DURATION.match(text or "")
    if match is None:
        raise WorkflowInputError(
            f"{text!r} is not a duration: write a whole number and a unit, such as 30d, "
            "12h, 45m, 90s or 2w."
        )
    amount, unit = match.groups()
    return timedelta(seconds=int(amount) * _UNITS[unit])


def purgeable(
    older_than: timedelta, statuses: Iterable[str] | None = None, *, now: datetime | None = None
) -> QuerySet[WorkflowInstance]:
    """Finished instances (of ``statuses``, all finished ones by default) that finished
    more than ``older_than`` ago."""
    statuses = _check_statuses(statuses)
    cutoff = (now or clock_now()) - older_than
    return WorkflowInstance.objects.filter(status__in=statuses, finished_at__lt=cutoff)


def purge(
    older_than: timedelta,
    statuses: Iterable[str] | None = None,
    *,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    now: datetime | None = None,
) -> PurgeReport:
    """Delete the finished instances that finished more than ``older_than`` ago, with all
    their rows, ``batch_size`` instances per transaction. On a dry run, only count them."""
    if batch_size < 1:
        raise WorkflowInputError(f"The batch size must be at least 1, not {batch_size}.")
    now = now or clock_now()
    queryset = purgeable(older_than, statuses, now=now)
    report = PurgeReport(cutoff=now - older_than, dry_run=dry_run)
    if dry_run:
        report.add(_count(queryset.values("pk")))
        return report
    last_pk = 0
    while True:
        batch = list(
            queryset.filter(pk__gt=last_pk).order_by("pk").values_list("pk", flat=True)[:batch_size]
        )
        if not batch:
            return report
        report.add(delete_batch(batch, queryset))
        last_pk = batch[-1]


def _count(instances: QuerySet[WorkflowInstance, Any]) -> dict[str, int]:
    counts = {"instances": instances.count()}
    for model in TABLES:
        counts[_label(model)] = model.objects.filter(instance__in=instances).count()
    return counts


def delete_batch(pks: list[int], queryset: QuerySet[WorkflowInstance]) -> dict[str, int]:
    """Delete the instances ``pks`` that are still in ``queryset`` (finished), with their
    rows, in one transaction; the counts of what went.

    The status is re-checked under the row locks (:func:`locks.take_purgeable`), in the
    transaction that deletes: an instance a concurrent retry, fork, event or tick made
    unfinished is left alone, and so is one another transaction holds (the next purge
    sees it again). The rows that stay and point at a deleted one (a fork, a detached
    child, a step that started it) lose the link, not their own rows.
    """
    using = router.db_for_write(WorkflowInstance)
    with transaction.atomic(using=using):
        pks = locks.take_purgeable(queryset, pks)
        if not pks:
            return {}
        *deleted, instances = purge_rows.delete_rows(using, TABLES, pks)
    counts = {_label(model): count for model, count in zip(TABLES, deleted, strict=True)}
    counts["instances"] = instances
    return counts


def _label(model: type[Model]) -> str:
    return _PLURALS[model]


def _check_statuses(statuses: Iterable[str] | None) -> list[str]:
    if statuses is None:
        return sorted(TERMINAL_STATUSES)
    statuses = list(statuses)
    unfinished = [status for status in statuses if status not in TERMINAL_STATUSES]
    if unfinished:
        raise WorkflowInputError(
            f"Purge only deletes finished instances; {', '.join(map(repr, unfinished))} is not "
            f"a finished status. Choose among {', '.join(sorted(TERMINAL_STATUSES))}."
        )
    return statuses
