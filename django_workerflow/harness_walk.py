"""The test harness's walk through virtual time: one stop at each alarm on the way."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django_workerflow.exceptions import WorkflowInputError
from django_workerflow.values.jsonvalue import check_aware

if TYPE_CHECKING:
    from django_workerflow.testing import Harness


def walk_to(harness: Harness, when: datetime) -> int:
    """Drain now, then at each alarm falling due up to ``when`` in time order, then at
    ``when``; return the ticks run. Each stop's ticks may set new alarms within the span,
    and the walk stops at those too, exactly as a worker would meet them."""
    check_aware(when, what="The harness advance_to time")
    if when < harness.now():
        raise WorkflowInputError(
            f"The harness cannot move its clock back from {harness.now().isoformat()} to "
            f"{when.isoformat()}; create a new Harness(start=...) to begin earlier."
        )
    ran = harness.drain()
    stops = 0
    while True:
        upcoming = _next_stop(harness.now(), when, harness.schedules)
        delivery = next_delivery(harness.now(), when)
        if delivery is not None and (upcoming is None or delivery < upcoming):
            upcoming = delivery
        if upcoming is None:
            break
        stops += 1
        if stops > harness.max_ticks:
            raise RuntimeError(
                f"advance stopped at {stops} alarms on the way to {when.isoformat()}; a "
                "workflow probably wakes itself forever."
            )
        harness.clock.advance(upcoming - harness.now())
        ran += harness.drain()
    harness.clock.advance(when - harness.now())
    return ran + harness.drain()


def _next_stop(now: datetime, when: datetime, schedules: frozenset[str] | None) -> datetime | None:
    """The earliest instance alarm or occurrence of a schedule the harness runs (``None``:
    all) in ``(now, when]``."""
    # Models need the app registry; the pytest plugin imports this before Django's setup.
    from django_workerflow.models import WorkflowInstance, WorkflowSchedule

    alarm = (
        WorkflowInstance.objects.active()
        .filter(alarm_at__gt=now, alarm_at__lte=when)
        .order_by("alarm_at")
        .values_list("alarm_at", flat=True)
        .first()
    )
    rows = WorkflowSchedule.objects.filter(
        enabled=True, in_code=True, next_run_at__gt=now, next_run_at__lte=when
    )
    if schedules is not None:
        rows = rows.filter(name__in=schedules)
    occurrence = rows.order_by("next_run_at").values_list("next_run_at", flat=True).first()
    found = [moment for moment in (alarm, occurrence) if moment is not None]
    return min(found) if found else None


def next_delivery(after: datetime, until: datetime) -> datetime | None:
    """When the next pending on_finish delivery falls due (a retry, or a lease running
    out) within ``(after, until]``."""
    # Models need the app registry; the pytest plugin imports this before Django's setup.
    from django_workerflow.models import FinishDelivery

    pending = FinishDelivery.objects.pending()
    times = [
        pending.filter(**{f"{field}__gt": after, f"{field}__lte": until})
        .order_by(field)
        .values_list(field, flat=True)
        .first()
        for field in ("next_attempt_at", "leased_until")
    ]
    due = [time for time in times if time is not None]
    return min(due) if due else None
