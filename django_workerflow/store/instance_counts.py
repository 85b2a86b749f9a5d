"""Counting instances by definition and status over a large table without scanning it.

Below :data:`SAMPLE_FROM` instances (and on SQLite), one exact grouped count. Above it
(PostgreSQL), a random sample of the table's pages (``TABLESAMPLE SYSTEM``) scaled to the
planner's row estimate gives the large counts of the statuses the caller lets be estimated;
then every other (definition, status) is counted exactly in one query on
``workerflow_name_status``, the definitions read by a skip scan of that index: a status
rare enough to be missed by the sample is still counted. The admin's overview and the
Prometheus gauge ``workerflow_instances`` read their counts here.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import TruncHour

from django_workerflow.models import WorkflowInstance
from django_workerflow.store import executor, sql
from django_workerflow.values.states import TERMINAL_STATUSES, WorkflowStatus

#: Below this (sample) estimate a (definition, status) is counted exactly.
EXACT_BELOW = 10_000
#: From this many instances on (the planner's estimate), large counts are estimated.
SAMPLE_FROM = 100_000
#: About how many rows the sample reads.
SAMPLE_ROWS = 30_000

#: (definition, status) -> (count, whether it is an estimate)
Counts = dict[tuple[str, str], tuple[int, bool]]


def estimated_rows(queryset: QuerySet[Any]) -> int | None:
    """PostgreSQL's planner estimate of the queryset's rows; None on other databases."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    query, params = queryset.order_by().query.sql_with_params()
    with connection.cursor() as cursor:
        text = sql.explain_statement(query)
        plan = executor.execute(cursor, "explain", params, text=text, prepare=False).fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def distinct_values(model: Any, column: str, using: str) -> list[str]:
    """The distinct non-null values of ``column``, in order, one index probe each."""
    connection = connections[using]
    table = connection.ops.quote_name(model._meta.db_table)
    column = connection.ops.quote_name(column)
    with connection.cursor() as cursor:
        text = sql.distinct_values_statement(table, column)
        rows = executor.execute(cursor, "distinct_values", text=text, prepare=False).fetchall()
        return [row[0] for row in rows]


def counts_by_status(estimable: Collection[str] = tuple(WorkflowStatus)) -> Counts:
    """Per definition and status, the number of instances and whether it is an estimate;
    only the statuses in ``estimable`` may be estimated."""
    instances = WorkflowInstance.objects.all()
    large = _large_counts(estimable)
    exact = instances
    if large:
        names = distinct_values(WorkflowInstance, "definition_name", instances.db)
        rest = Q(pk__in=[])
        for name in names:
            small = [s.value for s in WorkflowStatus if (name, s.value) not in large]
            if small:
                rest |= Q(definition_name=name, status__in=small)
        exact = instances.filter(rest)
    counts: Counts = {key: (estimate, True) for key, estimate in large.items()}
    rows = exact.values_list("definition_name", "status").annotate(n=Count("id")).order_by()
    for name, status, n in rows:
        counts[(name, status)] = (n, False)
    return counts


def finished_counts() -> Counts:
    """Per definition and finished status, the number of instances and whether it is an
    estimate: the large counts as :func:`counts_by_status` estimates them, the others
    counted exactly on ``workerflow_name_status``, one index-only scan per status."""
    instances = WorkflowInstance.objects.order_by()
    large = _large_counts(TERMINAL_STATUSES)
    counts: Counts = {key: (estimate, True) for key, estimate in large.items()}
    if not large:
        finished = instances.filter(status__in=TERMINAL_STATUSES)
        for name, status, n in finished.values_list("definition_name", "status").annotate(
            n=Count("*")
        ):
            counts[(name, status)] = (n, False)
        return counts
    names = distinct_values(WorkflowInstance, "definition_name", instances.db)
    for status in sorted(TERMINAL_STATUSES):
        small = [name for name in names if (name, status) not in large]
        if not small:
            continue
        # count(*), not count(id): the index holds no id, and reading it would visit the
        # table's pages (an index-only scan is what keeps this cheap).
        named = instances.filter(status=status, definition_name__in=small)
        for name, n in named.values_list("definition_name").annotate(n=Count("*")):
            counts[(name, status)] = (n, False)
    return counts


def _large_counts(estimable: Collection[str]) -> dict[tuple[str, str], int]:
    """On a large PostgreSQL table, the (definition, status) of ``estimable`` statuses
    whose sampled estimate reaches :data:`EXACT_BELOW`, with that estimate (else none)."""
    instances = WorkflowInstance.objects.all()
    total = estimated_rows(instances)
    large: dict[tuple[str, str], int] = {}
    if total is None or total < SAMPLE_FROM:
        return large
    table = connections[instances.db].ops.quote_name(WorkflowInstance._meta.db_table)
    percent = min(100.0, 100.0 * SAMPLE_ROWS / total)
    with connections[instances.db].cursor() as cursor:
        text = sql.sampled_counts_statement(table, percent)
        sampled = executor.execute(cursor, "sampled_counts", text=text, prepare=False)
        for name, status, n, read in sampled.fetchall():
            estimate = round(n * total / read)
            if estimate >= EXACT_BELOW and status in estimable:
                large[(name, status)] = estimate
    return large


def per_hour(
    instances: QuerySet[WorkflowInstance], field: str, hours: list[datetime]
) -> Iterator[tuple[str, str, datetime, int]]:
    """(definition, status, hour, count) of ``instances`` by the hour of ``field``: grouped by
    the truncated hour on PostgreSQL, one conditional count per hour elsewhere."""
    if connections[instances.db].vendor == "postgresql":
        rows = (
            instances.annotate(hour=TruncHour(field, tzinfo=UTC))
            .values("definition_name", "status", "hour")
            .annotate(n=Count("id"))
            .order_by()
        )
        for counted in rows:
            yield counted["definition_name"], counted["status"], counted["hour"], counted["n"]
        return
    one = timedelta(hours=1)
    per_hour = {
        f"h{i}": Count("id", filter=Q(**{f"{field}__gte": hour, f"{field}__lt": hour + one}))
        for i, hour in enumerate(hours)
    }
    grouped = instances.values("definition_name", "status").annotate(**per_hour).order_by()
    for values in grouped:
        row: dict[str, Any] = dict(values)  # the per-hour keys are built, not literal
        for i, hour in enumerate(hours):
            if row[f"h{i}"]:
                yield row["definition_name"], row["status"], hour, row[f"h{i}"]
