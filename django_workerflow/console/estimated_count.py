"""Counting the instance list without ``COUNT(*)`` over a large table.

Django's change list counts the filtered rows (and, by default, the whole table) on every
page; at a million instances each count scans the table. On PostgreSQL the paginator here
asks the planner instead (``EXPLAIN``: the row estimate from the table's statistics) and
counts exactly only when the estimate is small, so the figure shown over a large table is an
estimate. Above :data:`LARGE_LIST` rows the list also hides the date drill-down, whose
``DISTINCT`` over the dates scans every matching row.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypeAlias

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.functional import cached_property

from django_workerflow.store import sql

#: Below this estimate the rows are counted exactly (cheap, and exact where it shows).
EXACT_BELOW = 10_000
#: From this many rows on, the list hides its date hierarchy.
LARGE_LIST = 100_000


def estimated_rows(queryset: QuerySet[Any]) -> int | None:
    """PostgreSQL's planner estimate of the queryset's rows; None on other databases."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    query, params = queryset.order_by().query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql.explain_statement(query), params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


if TYPE_CHECKING:  # Paginator is generic for type checkers only
    PaginatorBase: TypeAlias = Paginator[Any]
else:
    PaginatorBase = Paginator


class EstimatedCountPaginator(PaginatorBase):
    """A paginator whose count is PostgreSQL's estimate once that reaches EXACT_BELOW."""

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if isinstance(queryset, QuerySet):
            estimate = estimated_rows(queryset)
            if estimate is not None and estimate >= EXACT_BELOW:
                return estimate
        return super().count
