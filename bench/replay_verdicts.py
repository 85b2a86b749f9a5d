"""Scenario ``verdicts``: replay verdicts (PostgreSQL).

- The background pass's rate: ``sizes.check_replay_instances`` instances of ``bench-deploy``
  (20 run steps, then asleep) are run inline, then :func:`django_workerflow.deploy.verdicts.
  refresh` checks and stores the verdict of each; the figure is instances per second (the
  same judge as check-replay, plus the writes of the verdicts).
- The change list filtered by verdict: ``sizes.admin_instances`` instances are written as
  scenario ``admin`` writes them (a third of them unfinished), then a stored verdict for every
  unfinished one but one in 1,000 (left "not checked yet"), one in 100 of them stranded,
  with one INSERT ... SELECT; then the change list is timed through Django's test client
  with ``?replays=no``, ``yes`` and ``unchecked``; then with ``?replays=no`` again once only
  one verdict in 10,000 is stranded. The tables are emptied afterwards.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from django.db import connection
from django.test import Client

from .admin_scale import _timed, fill_instances
from .common import Sizes, Stopwatch


def replay_verdicts(sizes: Sizes, progress: Any) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        return {"skipped": "measured on PostgreSQL"}
    from django.contrib.auth import get_user_model

    from django_workerflow.models import ReplayVerdictRecord, WorkflowInstance

    try:
        rate = _pass_rate(sizes, progress)
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {WorkflowInstance._meta.db_table} CASCADE")
            cursor.execute(f"TRUNCATE {ReplayVerdictRecord._meta.db_table}")
        progress(f"verdicts: {sizes.admin_instances:,} instances")
        began = time.perf_counter()
        fill_instances(sizes.admin_instances)
        stored = _fill_verdicts()
        fill_seconds = time.perf_counter() - began
        user = get_user_model().objects.create_superuser(f"bench-{uuid.uuid4().hex[:8]}", "", "x")
        client = Client()
        client.force_login(user)
        base = "/admin/workerflow/workflowinstance/"
        try:
            lists = {
                state: _timed(client, f"{base}?replays={state}", sizes.admin_repeats)
                for state in ("no", "yes", "unchecked")
            }
            _fewer_stranded()
            lists["no_rare"] = _timed(client, f"{base}?replays=no", sizes.admin_repeats)
        finally:
            user.delete()
        return {
            **rate,
            "instances": WorkflowInstance.objects.count(),
            "stored_verdicts": stored,
            "fill_seconds": fill_seconds,
            "change_list": lists,
        }
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {WorkflowInstance._meta.db_table} CASCADE")
            cursor.execute(f"TRUNCATE {ReplayVerdictRecord._meta.db_table}")


def _pass_rate(sizes: Sizes, progress: Any) -> dict[str, Any]:
    from django_workerflow import start
    from django_workerflow.deploy import verdicts
    from django_workerflow.runtime.tick import tick
    from django_workerflow.workers import bells

    count = sizes.check_replay_instances
    progress(f"verdicts: running {count:,} instances of 20 steps")
    with bells.suppressed():
        for index in range(count):
            instance = start("bench-deploy", key=f"verdict-{index}")
            tick(instance.pk)
    progress("verdicts: the background pass")
    with Stopwatch() as watch:
        done = verdicts.refresh()
    if done.checked != count or done.stranded:
        raise RuntimeError(f"The pass did not check every instance cleanly: {done}.")
    return {
        "pass_instances": count,
        "pass_seconds": watch.seconds,
        "pass_cpu_seconds": watch.cpu_seconds,
        "pass_instances_per_second": count / watch.seconds,
    }


def _fill_verdicts() -> int:
    """A verdict, current for this process's code, for every unfinished instance but one in
    1,000; one in 100 of them stranded."""
    from django_workerflow.deploy import verdicts
    from django_workerflow.models import ReplayVerdictRecord, WorkflowInstance

    code = verdicts.code_fingerprint()
    table, instances = ReplayVerdictRecord._meta.db_table, WorkflowInstance._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (instance_id, code, ok, reason, checked_at)
            SELECT id, %s, id %% 100 <> 0,
                CASE WHEN id %% 100 = 0 THEN 'Instance ''' || key || ''' runs a version '
                    'that is not registered.' ELSE '' END, now()
            FROM {instances}
            WHERE status IN ('pending', 'running', 'paused') AND id %% 1000 <> 7""",
            [code],
        )
        stored = cursor.rowcount
        cursor.execute(f"ANALYZE {table}")
    return stored


def _fewer_stranded() -> None:
    """Keep one stranded verdict in 10,000 instead of one in 100 (a deploy that strands few)."""
    from django_workerflow.models import ReplayVerdictRecord

    table = ReplayVerdictRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET ok = true, reason = '' WHERE NOT ok AND instance_id %% %s <> 0",
            [10_000],
        )
        cursor.execute(f"VACUUM ANALYZE {table}")
