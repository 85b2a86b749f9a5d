"""The targets of issue 21 (the django.tasks backend), each printed PASS or MISS."""

from __future__ import annotations

from typing import Any

from .report import Missing, Results, Table, check, dig, ms

#: The median from just before ``enqueue()`` to the task's ``started_at``, on each database.
START_MEDIAN_SECONDS = 0.050


def _ours(r: dict[str, Any]) -> dict[str, Any]:
    section = dig(r, "tasks", "ours")
    if "skipped" in section:
        raise Missing(("tasks", "ours"))
    return section


def start_latency(r: dict[str, Any]) -> str:
    median = dig(_ours(r), "start_latency", "median")
    return check(f"{ms(median)} ms", median < START_MEDIAN_SECONDS)


def throughput(r: dict[str, Any]) -> str:
    ours = dig(_ours(r), "tasks_per_second")
    theirs = dig(r, "tasks", "django_tasks_db")
    if "skipped" in theirs:
        return f"{ours:,.0f} tasks/s (no django-tasks-db)"
    rate = dig(theirs, "tasks_per_second")
    return check(f"{ours:,.0f} vs {rate:,.0f} tasks/s", ours >= rate)


def targets_table(results: Results) -> Table:
    table = Table(results)
    table.header("Targets (issue 21)")
    table.row("django.tasks enqueue to started: median < 50 ms", start_latency, "tasks")
    table.row("django.tasks drained: ours >= django-tasks-db", throughput, "tasks")
    return table
