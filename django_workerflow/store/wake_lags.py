"""The wake lag's percentiles by definition, where the database computes them.

PostgreSQL has ``percentile_cont``: the hour's woken sleeps are grouped by definition in one
query. Elsewhere :func:`by_definition` answers None and the caller samples the lags and
interpolates them itself (:mod:`django_workerflow.console.overview`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connections, transaction
from django.db.models import (
    Aggregate,
    Count,
    DurationField,
    Expression,
    ExpressionWrapper,
    F,
    OuterRef,
    Subquery,
)

from django_workerflow.models import Step, StepEvent, StepEventType, WorkflowInstance
from django_workerflow.store import executor

#: A definition's woken sleeps: how many, and the lag's p50 and p99.
Lags = tuple[int, timedelta | None, timedelta | None]


def by_definition(since: datetime) -> dict[str, Lags] | None:
    """The lags of the sleeps woken since ``since``, per definition, computed by the
    database; None where it cannot (SQLite): the caller then computes them."""
    if connections[StepEvent.objects.db].vendor != "postgresql":
        return None
    return _grouped(since)


class PercentileCont(Aggregate):
    """PostgreSQL's ``percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)``: the
    linear interpolation :func:`django_workerflow.console.overview.percentile` does in Python."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression: Expression, fraction: float) -> None:
        # A float formatted here, never user input: it is written into the SQL.
        super().__init__(expression, fraction=repr(float(fraction)), output_field=DurationField())


def _grouped(since: datetime) -> dict[str, Lags]:
    """PostgreSQL: the hour's woken sleeps grouped by definition, each sleep's due time and
    definition looked up by primary key, so the query costs what the hour holds. The
    planner guesses the hour's share of sleeps from all step events: after a burst of run
    steps it guessed 60 times too many and hash-joined the whole instance and step tables
    (590 ms at a million instances). The same guess prices the lookups over PostgreSQL's
    JIT threshold, and compiling took 640 ms for a query that runs in 6 ms: JIT is off
    for this one transaction."""
    due = Subquery(Step.objects.filter(pk=OuterRef("step_id")).order_by().values("wake_at")[:1])
    definition = Subquery(
        WorkflowInstance.objects.filter(pk=OuterRef("instance_id"))
        .order_by()
        .values("definition_name")[:1]
    )
    lag = ExpressionWrapper(F("recorded_at") - F("due"), output_field=DurationField())
    rows = (
        StepEvent.objects.filter(type=StepEventType.SLEEP_ELAPSED, recorded_at__gte=since)
        .annotate(due=due)
        # As ``woken_sleeps()``: a sleep with no due time is not counted.
        .filter(due__isnull=False)
        .annotate(definition=definition)
        .order_by()
        .values("definition")
        .annotate(n=Count("id"), p50=PercentileCont(lag, 0.5), p99=PercentileCont(lag, 0.99))
    )
    with transaction.atomic(using=rows.db), connections[rows.db].cursor() as cursor:
        executor.execute(cursor, "jit_off", text="SET LOCAL jit = off", prepare=False)
        return {row["definition"]: (row["n"], row["p50"], row["p99"]) for row in rows}
