"""Scenario ``starts``: starting instances, and bells under a backlog.

- ``start()`` of one instance with its bell (django-q2's ORM broker, no cluster running):
  median and p99 beside the raw commit time measured right before and after; the
  statements and transactions of one start (the median over ``COUNTED`` starts), and the
  mean, which includes PostgreSQL's draws of an id block (``instance_ids.IdBlock``).
- ``start_many()`` of ``start_many`` instances: instances per second, and beside it a plain
  multi-row INSERT of the same rows into the instance table (1,000 rows a statement, one
  transaction).
- ``bells`` bells due at once, shuffled, drained through :class:`DueFirstOrmBroker`:
  inversions of the due order (0 expected) and the drain time; django-q2's own ORM broker
  on the same backlog for comparison.
Everything this scenario creates is deleted afterwards.
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from django_workerflow import start, start_many
from django_workerflow.models import WorkflowInstance
from django_workerflow.runtime.starting import BATCH_ROWS
from django_workerflow.store import sql
from django_workerflow.store.instance_ids import ID_BLOCK_SIZE

from .common import Sizes, percentile
from .inline import StatementCounter, commit_rate, create_probe_table

# Starts whose statements are counted: two of PostgreSQL's id blocks, so the mean includes
# the draws in their proportion.
COUNTED = 2 * ID_BLOCK_SIZE
#: start_many() and the plain INSERT of the same rows, alternated this many times.
RATIO_RUNS = 3


def _clean(prefix: str) -> None:
    from django_q.models import OrmQ

    WorkflowInstance.objects.filter(key__startswith=prefix).delete()
    OrmQ.objects.all().delete()


def start_latency(count: int, probe_seconds: float) -> dict[str, Any]:
    prefix = f"bench-start-{uuid.uuid4().hex[:8]}-"
    create_probe_table()
    start("bench-steps", key=f"{prefix}warm", input={"steps": 1})
    before = commit_rate(probe_seconds)
    timings = []
    for number in range(count):
        began = time.perf_counter()
        start("bench-steps", key=f"{prefix}{number}", input={"steps": 1})
        timings.append(time.perf_counter() - began)
    after = commit_rate(probe_seconds)
    statements, transactions = [], []
    for number in range(COUNTED):  # counted apart: the wrapper's cost stays out of the timings
        counter = StatementCounter()
        with connection.execute_wrapper(counter):
            start("bench-steps", key=f"{prefix}counted-{number}", input={"steps": 1})
        statements.append(len(counter.statements))
        transactions.append(counter.transactions)
    _clean(prefix)
    raw_seconds = 2 / (before + after)
    median = statistics.median(timings)
    return {
        "starts": count,
        "median": median,
        "p99": percentile(timings, 0.99),
        "raw_commit_seconds": raw_seconds,
        "ratio_to_raw_commit": median / raw_seconds,
        "statements": statistics.median_low(statements),
        "statements_mean": statistics.mean(statements),
        "transactions": statistics.median_low(transactions),
    }


def _plain_insert_seconds(prefix: str) -> float:
    """The rows ``start_many`` created under ``prefix``, deleted and inserted again by plain
    multi-row INSERTs (``BATCH_ROWS`` = 1,000 rows a statement, all in one transaction, its
    commit timed): the comparison a user would make, the database's own time for the same
    instance rows without their events, bells or the engine."""
    columns = [f.column for f in WorkflowInstance._meta.concrete_fields if f.column != "id"]
    quoted = ", ".join(connection.ops.quote_name(column) for column in columns)
    with connection.cursor() as cursor:
        # As stored (JSON as text), not as the model's fields would return them.
        cursor.execute(
            f"SELECT {quoted} FROM {sql.INSTANCE} WHERE {connection.ops.quote_name('key')} "
            "LIKE %s ORDER BY id",
            [f"{prefix}%"],
        )
        rows = cursor.fetchall()
    _clean(prefix)
    statements = []
    for first in range(0, len(rows), BATCH_ROWS):
        batch = rows[first : first + BATCH_ROWS]
        marks = ", ".join(["(" + ", ".join(["%s"] * len(columns)) + ")"] * len(batch))
        statements.append(
            (
                f"INSERT INTO {sql.INSTANCE} ({quoted}) VALUES {marks}",
                [value for row in batch for value in row],
            )
        )
    began = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        for text, values in statements:
            cursor.execute(text, values)
    return time.perf_counter() - began


def start_many_rate(count: int) -> dict[str, Any]:
    """``start_many()`` of ``count`` instances, then a plain multi-row INSERT of the same
    rows in the same run (``RATIO_RUNS`` alternating pairs, the median of each)."""
    ours, plain = [], []
    for _run in range(RATIO_RUNS):
        prefix = f"bench-many-{uuid.uuid4().hex[:8]}-"
        items = [(f"{prefix}{number}", {"steps": 1}) for number in range(count)]
        began = time.perf_counter()
        instances = start_many("bench-steps", items)
        ours.append(time.perf_counter() - began)
        if len(instances) != count:
            raise RuntimeError(f"start_many created {len(instances)} of {count}.")
        plain.append(_plain_insert_seconds(prefix))
        _clean(prefix)
    seconds, plain_seconds = statistics.median(ours), statistics.median(plain)
    return {
        "instances": count,
        "seconds": seconds,
        "instances_per_second": count / seconds,
        "plain_insert_per_second": count / plain_seconds,
        "ratio_to_plain_insert": plain_seconds / seconds,
        "runs_per_second": [count / run for run in ours],
        "plain_runs_per_second": [count / run for run in plain],
    }


def _inversions(values: list[Any]) -> int:
    """Pairs out of order (merge-sort count, O(n log n))."""

    def count(items: list[Any]) -> tuple[list[Any], int]:
        if len(items) <= 1:
            return items, 0
        middle = len(items) // 2
        left, a = count(items[:middle])
        right, b = count(items[middle:])
        merged, inverted, i, j = [], a + b, 0, 0
        while i < len(left) and j < len(right):
            if right[j] < left[i]:
                merged.append(right[j])
                inverted += len(left) - i
                j += 1
            else:
                merged.append(left[i])
                i += 1
        return merged + left[i:] + right[j:], inverted

    return count(values)[1]


def bell_backlog(count: int, broker_class: type) -> dict[str, Any]:
    from django_q.conf import Conf
    from django_q.models import OrmQ

    OrmQ.objects.all().delete()
    now = timezone.now()
    dues = [now - timedelta(milliseconds=number) for number in range(1, count + 1)]
    random.Random(15).shuffle(dues)
    OrmQ.objects.bulk_create(
        (OrmQ(key=Conf.CLUSTER_NAME, payload=due.isoformat(), lock=due) for due in dues),
        batch_size=1000,
    )
    broker = broker_class(list_key=Conf.CLUSTER_NAME)
    order: list[str] = []
    began = time.perf_counter()
    while len(order) < count:
        for pk, payload in broker.dequeue() or []:
            order.append(payload)
            broker.acknowledge(pk)
    seconds = time.perf_counter() - began
    return {
        "bells": count,
        "drain_seconds": seconds,
        "bells_per_second": count / seconds,
        "inversions": _inversions(order),
    }


def starts(sizes: Sizes) -> dict[str, Any]:
    from django_q.brokers.orm import ORM

    from django_workerflow.broker import DueFirstOrmBroker

    return {
        "start": start_latency(sizes.starts_timed, sizes.commit_probe_seconds),
        "start_many": start_many_rate(sizes.start_many),
        "bells": bell_backlog(sizes.bells, DueFirstOrmBroker),
        "bells_django_q2_orm": bell_backlog(min(sizes.bells, 2_000), ORM),
    }
