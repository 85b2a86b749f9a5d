"""Scenario ``scale``: many sleeping instances. Bytes per instance, the due lookup, the sweeper.

The instances are inserted with bulk SQL, shaped as the engine leaves a one-sleep workflow
(``bench-sleep``) that went to sleep: the instance row, its sleep step, the step's
``sleep_waiting`` event and the instance's ``created`` and ``started`` events. A few of them
are overdue (alarm a minute ago, spread through the table), the rest sleep for a day or more.
The engine's tables are emptied first, so their size is these instances' alone.
"""

from __future__ import annotations

import statistics
import time
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

from django.db import connection

from django_workerflow.models import (
    InboundEvent,
    Step,
    StoredStepEvent,
    WorkflowEvent,
    WorkflowInstance,
)
from django_workerflow.runtime import sweeping
from django_workerflow.runtime.tick import tick
from django_workerflow.store.instance_ids import id_block
from django_workerflow.values.clock import now as clock_now
from django_workerflow.workers import bells

from .common import Sizes, timed

INSTANCE = WorkflowInstance._meta.db_table
STEP = Step._meta.db_table
STEP_EVENT = StoredStepEvent._meta.db_table
WORKFLOW_EVENT = WorkflowEvent._meta.db_table
INBOUND = InboundEvent._meta.db_table
# Children first: SQLite checks the foreign keys of each DELETE.
TABLES = (INBOUND, STEP_EVENT, WORKFLOW_EVENT, STEP, INSTANCE)
KEY_PREFIX = "scale-"


def empty_engine_tables() -> None:
    from django_q.models import OrmQ

    OrmQ.objects.all().delete()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # CASCADE: tables added later that point at instances (on_finish deliveries).
            cursor.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
            # The ids this process drew before the reset would come round again: a later
            # insert that takes its id from the sequence would collide with a start that
            # took one of them.
            id_block.discard()
            cursor.execute(f"VACUUM ANALYZE {', '.join(TABLES)}")
        else:
            for table in TABLES:
                cursor.execute(f"DELETE FROM {table}")
            cursor.execute("VACUUM")


def database_bytes() -> int:
    """PostgreSQL: the engine tables with their indexes and TOAST; SQLite: the file's pages."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT sum(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) AS t",
                [list(TABLES)],
            )
        else:
            cursor.execute(
                "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
            )
        return int(cursor.fetchone()[0])


def _series() -> str:
    """Rows ``i`` = 1..%(count)s."""
    if connection.vendor == "postgresql":
        return "generate_series(1, %(count)s) AS series(i)"
    return (
        "(WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq "
        "WHERE i < %(count)s) SELECT i FROM seq) AS series"
    )


def _later(seconds: str) -> str:
    """%(later)s plus ``seconds`` seconds, in the database's datetime format."""
    if connection.vendor == "postgresql":
        return f"(%(later)s::timestamptz + {seconds} * interval '1 second')"
    return f"datetime(%(later)s, '+' || ({seconds}) || ' seconds')"


def insert_sleeping_instances(count: int, due: int) -> None:
    """``count`` sleeping instances, every ``count // due``-th of them overdue."""
    now = clock_now()
    adapt = connection.ops.adapt_datetimefield_value
    params = {
        "count": count,
        "stride": count // due,
        "now": adapt(now),
        "overdue": adapt(now - timedelta(minutes=1)),
        "later": adapt((now + timedelta(days=1)).replace(microsecond=0)),
        "prefix": KEY_PREFIX,
    }
    wake = f"CASE WHEN i %% %(stride)s = 0 THEN %(overdue)s ELSE {_later('i')} END"
    false = "false" if connection.vendor == "postgresql" else "0"
    concat = "%(prefix)s || i::text" if connection.vendor == "postgresql" else "%(prefix)s || i"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {INSTANCE} (key, definition_name, definition_version, input, status, "
            "error_name, error_message, alarm_at, wake_requested, created_at, updated_at, "
            "priority, concurrency_key, admitted_at) "
            f"SELECT {concat}, 'bench-sleep', '1', '{{\"seconds\": 86400}}', 'running', '', '', "
            f"{wake}, {false}, %(now)s, %(now)s, 0, '', %(now)s FROM {_series()}",
            params,
        )
        cursor.execute(
            f"INSERT INTO {STEP} (instance_id, step_id, type, state, attempt_count, "
            "error_name, error_message, wake_at, event_name, created_at) "
            "SELECT id, 'nap', 'sleep', 'waiting', 0, '', '', alarm_at, '', created_at "
            f"FROM {INSTANCE} WHERE key LIKE %(like)s",
            {"like": f"{KEY_PREFIX}%"},
        )
        cursor.execute(
            f"INSERT INTO {STEP_EVENT} (instance_id, step_id, type, wake_at, error_name, "
            "error_message, event_name, recorded_at) "
            f"SELECT instance_id, id, 'sleep_waiting', wake_at, '', '', '', created_at FROM {STEP}"
        )
        for event_type in ("created", "started"):
            cursor.execute(
                f"INSERT INTO {WORKFLOW_EVENT} (instance_id, type, recorded_at) "
                f"SELECT id, %(type)s, created_at FROM {INSTANCE}",
                {"type": event_type},
            )


def due_lookup(sizes: Sizes) -> tuple[float, int]:
    """Median seconds of ``WorkflowInstance.objects.due(now)`` fetching the due pks."""
    now = clock_now()
    queryset = WorkflowInstance.objects.due(now).values_list("pk", flat=True)
    found = len(list(queryset))
    timings = [timed(lambda: list(queryset.all())) for _ in range(sizes.due_repeats)]
    return statistics.median(timings), found


def explain_due() -> str:
    queryset = WorkflowInstance.objects.due(clock_now()).values_list("pk", flat=True)
    if connection.vendor == "postgresql":
        return queryset.explain(analyze=True, buffers=True)
    return queryset.explain()


def sweep_seconds(repeats: int, *, ringing: bool) -> tuple[float, int]:
    """Median seconds of a sweeper pass (ringing bells or not), and how many it rang."""
    timings = []
    rang = 0
    for _ in range(repeats):
        with nullcontext() if ringing else bells.suppressed():
            began = time.perf_counter()
            rang = sweeping.sweep()
            timings.append(time.perf_counter() - began)
    return statistics.median(timings), rang


def wake_one_due() -> str:
    """A tick of one overdue bulk instance: it must complete like a real one would."""
    pk = (
        WorkflowInstance.objects.due(clock_now())
        .filter(key__startswith=KEY_PREFIX)
        .values_list("pk", flat=True)
        .first()
    )
    with bells.suppressed():
        return tick(pk).outcome


def analyze() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"ANALYZE {', '.join(TABLES)}" if connection.vendor == "postgresql" else "ANALYZE"
        )


def scale(sizes: Sizes, progress: Any) -> dict[str, Any]:
    """The figures as each database runs unattended: PostgreSQL's autovacuum analyzes a bulk
    load within a minute (done here at once); nothing runs ANALYZE on SQLite unless the
    application does, so SQLite is measured without statistics, then once more with them."""
    progress("emptying the engine tables")
    empty_engine_tables()
    before = database_bytes()
    progress(f"inserting {sizes.scale_instances:,} sleeping instances")
    insert_seconds = timed(
        lambda: insert_sleeping_instances(sizes.scale_instances, sizes.scale_due)
    )
    if connection.vendor == "postgresql":
        analyze()
    after = database_bytes()
    lookup, found = due_lookup(sizes)
    plan = explain_due()
    progress("sweeper passes")
    sweep_quiet, swept_quiet = sweep_seconds(sizes.sweep_repeats, ringing=False)
    sweep_ringing, swept_ringing = sweep_seconds(sizes.sweep_repeats, ringing=True)
    if connection.vendor == "postgresql":
        lookup_analyzed, plan_analyzed = lookup, None
    else:
        analyze()
        lookup_analyzed = due_lookup(sizes)[0]
        plan_analyzed = explain_due()
    outcome = wake_one_due()
    if outcome != "completed":
        raise RuntimeError(f"A bulk-inserted sleeping instance ticked to {outcome!r}.")
    return {
        "instances": sizes.scale_instances,
        "due": sizes.scale_due,
        "insert_seconds": insert_seconds,
        "bytes_per_instance": (after - before) / sizes.scale_instances,
        "due_lookup_ms": 1000 * lookup,
        "due_lookup_analyzed_ms": 1000 * lookup_analyzed,
        "due_found": found,
        "sweep_suppressed_ms": 1000 * sweep_quiet,
        "sweep_ms": 1000 * sweep_ringing,
        "sweep_rang": swept_ringing,
        "sweep_suppressed_rang": swept_quiet,
        "explain": plan,
        "explain_analyzed": plan_analyzed,
    }
