"""Scenario ``admin``: the admin over a large table (PostgreSQL).

``admin_instances`` finished and active instances of four definitions, one a second back
from now (the last 24 hours hold 86,400 of them), are written with one INSERT ... SELECT
from ``generate_series``, and a sleep woken up to a second late for every fourth of them
(about 900 in the last hour); then the instance change list is timed through Django's test
client (a logged-in superuser), without and with a status filter, the change page of one
instance of ``admin_steps`` run steps, and the overview page (Workflows, then Overview).
The queries each page sends are counted, and those counting rows are listed. The tables
are emptied afterwards.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_workerflow.models import Step, StoredStepEvent, WorkflowInstance
from django_workerflow.values.clock import now as clock_now

from .common import Sizes
from .inline import drive, start_inline

STATUS_CYCLE = ("completed", "completed", "completed", "failed", "running", "pending")
#: The first this many of STATUS_CYCLE are finished (their finished_at is set).
FINISHED = 4
DEFINITIONS = 4


def fill_instances(
    count: int,
    statuses: tuple[str, ...] = STATUS_CYCLE,
    finished: int = FINISHED,
    expressions_of: dict[str, str] | None = None,
) -> None:
    """``count`` instances, their statuses cycling through ``statuses`` (whose first
    ``finished`` are finished ones) and their definitions through ``bench-admin-0`` to
    ``-3``, created (and admitted) a second apart back from now (a finished one finished a
    second after it was created). ``expressions_of``: SQL of the series number ``g`` for
    other fields, by name (``{"attributes": "jsonb_build_object(...)"}``)."""
    now = clock_now()
    template = WorkflowInstance(
        key="",
        definition_name="bench-steps",
        definition_version="1",
        status="completed",
        created_at=now,
        updated_at=now,
    )
    fields = [f for f in WorkflowInstance._meta.concrete_fields if not f.primary_key]
    expressions, params = [], []
    cycle = "ARRAY[" + ", ".join(f"'{s}'" for s in statuses) + "]"
    for field in fields:
        if expressions_of and field.name in expressions_of:
            expressions.append(expressions_of[field.name])
        elif field.name == "key":
            expressions.append("'bench-admin-' || g")
        elif field.name == "definition_name":
            expressions.append(f"'bench-admin-' || (g %% {DEFINITIONS})")
        elif field.name == "finished_at":
            expressions.append(
                f"CASE WHEN g %% {len(statuses)} < {finished} "
                "THEN %s::timestamptz - (g - 1) * interval '1 second' END"
            )
            params.append(now)
        elif field.name == "status":
            expressions.append(f"({cycle})[1 + g %% {len(statuses)}]")
        elif field.name in ("created_at", "updated_at", "admitted_at"):
            # Admitted when created, as start() writes a definition without flow control.
            expressions.append("%s::timestamptz - g * interval '1 second'")
            params.append(now)
        else:
            expressions.append("%s")
            params.append(field.get_db_prep_save(field.value_from_object(template), connection))
    columns = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {WorkflowInstance._meta.db_table} ({columns}) "
            f"SELECT {', '.join(expressions)} FROM generate_series(1, {count}) AS g",
            params,
        )
        cursor.execute(f"ANALYZE {WorkflowInstance._meta.db_table}")


def _fill_sleeps() -> None:
    """A sleep step for every fourth instance, due a minute after its creation and woken up
    to 999 ms late, with its ``sleep_elapsed`` event: what the overview's wake lag reads."""
    step, event = Step._meta.db_table, StoredStepEvent._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH sleeps AS (
                INSERT INTO {step} (instance_id, step_id, type, state, attempt_count,
                    error_name, error_message, wake_at, event_name, resolved_at, created_at)
                SELECT id, 'nap', 'sleep', 'elapsed', 0, '', '', created_at + interval '1 minute',
                    '', created_at + interval '1 minute' + (id % 1000) * interval '1 ms',
                    created_at
                FROM {WorkflowInstance._meta.db_table} WHERE id % 4 = 0
                -- Instances of the scenarios run before this one may have a 'nap' already.
                ON CONFLICT DO NOTHING
                RETURNING id, instance_id, resolved_at
            )
            INSERT INTO {event} (instance_id, step_id, type, error_name, error_message,
                event_name, recorded_at)
            SELECT instance_id, id, 'sleep_elapsed', '', '', '', resolved_at FROM sleeps"""
        )
        cursor.execute(f"ANALYZE {step}")
        cursor.execute(f"ANALYZE {event}")


def _timed(client: Client, url: str, repeats: int) -> dict[str, Any]:
    client.get(url)  # warm: templates, the estimate's plan
    timings = []
    for _ in range(repeats):
        began = time.perf_counter()
        response = client.get(url)
        timings.append(time.perf_counter() - began)
        if response.status_code != 200:
            raise RuntimeError(f"GET {url} answered {response.status_code}.")
    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    counting = [q["sql"][:120] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    return {
        "median": statistics.median(timings),
        "max": max(timings),
        "queries": len(queries.captured_queries),
        "counting_queries": counting,
    }


def admin_scale(sizes: Sizes, progress: Any) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        return {"skipped": "measured on PostgreSQL"}
    from django.contrib.auth import get_user_model

    progress(f"admin: a workflow of {sizes.admin_steps:,} steps")
    big = start_inline("bench-steps", sizes.admin_steps)
    drive(big)
    progress(f"admin: {sizes.admin_instances:,} instances")
    began = time.perf_counter()
    fill_instances(sizes.admin_instances)
    _fill_sleeps()
    fill_seconds = time.perf_counter() - began
    user = get_user_model().objects.create_superuser(f"bench-{uuid.uuid4().hex[:8]}", "", "x")
    client = Client()
    client.force_login(user)
    base = "/admin/workerflow/workflowinstance/"
    try:
        return {
            "instances": WorkflowInstance.objects.count(),
            "fill_seconds": fill_seconds,
            "change_list": _timed(client, base, sizes.admin_repeats),
            "change_list_running": _timed(
                client, f"{base}?status__exact=running", sizes.admin_repeats
            ),
            "change_page_steps": sizes.admin_steps,
            "change_page": _timed(client, f"{base}{big}/change/", sizes.admin_repeats),
            "overview": _timed(client, f"{base}overview/", sizes.admin_repeats),
        }
    finally:
        user.delete()
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {WorkflowInstance._meta.db_table} CASCADE")
