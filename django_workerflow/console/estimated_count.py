"""Counting the instance list without ``COUNT(*)`` over a large table.

Django's change list counts the filtered rows (and, by default, the whole table) on every
page; at a million instances each count scans the table. On PostgreSQL the paginator here
asks the planner instead (``EXPLAIN``: the row estimate from the table's statistics) and
counts exactly only when the estimate is small, so the figure shown over a large table is an
estimate. Above :data:`LARGE_LIST` rows the list also hides the date drill-down, whose
``DISTINCT`` over the dates scans every matching row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property

from django_workerflow.store.instance_counts import estimated_rows

#: Below this estimate the rows are counted exactly (cheap, and exact where it shows).
EXACT_BELOW = 10_000
#: From this many rows on, the list hides its date hierarchy.
LARGE_LIST = 100_000


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
